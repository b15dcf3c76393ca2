"""`evaluate --documents K / --collection` (issue 59, evaluate/open_domain.py): questions asked of a document made of
their article among others and of a collection of paragraphs and distractors, read as `QAModel.predict` and
`Pipeline.answer(q, index=...)` read them, at tiny size with the shipped model."""
from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from arabert_pipeline.artifacts.models import shipped_model_dir
from arabert_pipeline.cli import main
from arabert_pipeline.errors import ConfigError
from arabert_pipeline.evaluate import load
from arabert_pipeline.evaluate.cli import RETRIEVER_NAMES
from arabert_pipeline.evaluate.open_domain import (
    OpenOptions,
    OpenRun,
    articles,
    distractor_documents,
    document_examples,
    no_answer_summary,
)
from arabert_pipeline.evaluate.retrievers import RETRIEVERS, TfidfRetriever
from arabert_pipeline.qa.data import read_squad
from arabert_pipeline.qa.transformer.passages import answer_from_index
from arabert_pipeline.retrieval.index import Index, rank_passages
from arabert_pipeline.retrieval.inputs import read_documents
from data_slices import write_first_articles, write_first_documents

FAST = ["--resamples", "200", "--baselines", "none"]


@pytest.fixture(scope="module")
def model():
    from arabert_pipeline.qa.transformer.onnx import OnnxQAModel

    return OnnxQAModel.load(shipped_model_dir("arabert-mini"))


@pytest.fixture(scope="module")
def slices(shared_data, tmp_path_factory):
    """Six ARCD-train articles and four MLQA-ar dev articles as SQuAD files, and 40 news documents."""
    directory = tmp_path_factory.mktemp("open")
    return (write_first_articles("arcd-train", directory / "arcd6.json", 6),
            write_first_articles("mlqa-ar-dev", directory / "mlqa4.json", 4),
            write_first_documents(shared_data / "corpus" / "ant-jawharafm-000.txt.xz", directory / "news.txt", 40))


def test_the_cli_repeats_the_retrievers_names():
    assert RETRIEVER_NAMES == RETRIEVERS


def test_a_document_is_the_article_among_k_others_with_its_answers_moved(slices):
    examples = read_squad(str(slices[0]), misaligned="keep").examples
    documents = document_examples(examples, examples, 2, seed=0)
    by_title = articles(examples)
    for example, document in zip(examples, documents, strict=True):
        text = document["context"]
        for answer, start in zip(document["answers"]["text"], document["answers"]["answer_start"], strict=True):
            assert text[start:start + len(answer)] == answer
        shift = document["paragraph_start"]
        assert text[shift:shift + len(example["context"])] == example["context"] == document["paragraph"]
        pieces = text.split("\n\n")
        owners = {title for title, paragraphs in by_title.items() if set(paragraphs) <= set(pieces)}
        assert example["title"] in owners and len(owners) == 3  # its article and two others, whole
        assert len(pieces) == sum(len(by_title[title]) for title in owners)
    assert document_examples(examples, examples, 2, seed=0) == documents  # seeded
    other_seed = document_examples(examples, examples, 2, seed=1)
    assert [d["context"] for d in other_seed] != [d["context"] for d in documents]
    # More others asked for than there are: every article, once.
    everything = document_examples(examples[:1], examples, 100, seed=0)[0]["context"]
    assert sorted(everything.split("\n\n")) == sorted(p for paragraphs in by_title.values() for p in paragraphs)


def test_tfidf_ranks_passages_as_soqal_scores_them():
    """SOQAL's TfidfRetriever: scikit-learn's vectors of unigrams and bigrams, not normalized, dot product."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    texts = ["يعد نهر النيل أطول أنهار العالم، ويبلغ طوله نحو 6650 كيلومترا.",
             "تقع مدينة البتراء الأثرية في جنوب الأردن، وقد نحتها الأنباط في الصخر.",
             "نهر الأردن قصير، وطول النيل لا يقارن به.",
             "افتتح المعرض الدولي للكتاب أبوابه أمس."]
    retriever = TfidfRetriever.build(texts, ids=["a", "b", "c", "d"], titles=["A", None, "C", "D"])
    question = "كم يبلغ طول نهر النيل؟"
    hits = retriever.search(question, 10)
    vectorizer = TfidfVectorizer(ngram_range=(1, 2), norm=None)
    expected = (vectorizer.fit_transform(texts) @ vectorizer.transform([question]).T).toarray()[:, 0]
    assert [h.document for h in hits] == [["a", "b", "c", "d"][i] for i in np.argsort(-expected) if expected[i] > 0]
    assert [h.score for h in hits] == pytest.approx(sorted(expected[expected > 0], reverse=True), rel=1e-5)
    assert "d" not in [h.document for h in hits]  # no term shared: no hit
    for hit in hits:
        assert retriever.document_text(hit.passage.document)[hit.passage.start:hit.passage.end] == hit.text
    assert hits[0].title == "A" and retriever.search(question, 1) == hits[:1]
    assert retriever.search("xyz", 3) == []
    with pytest.raises(ConfigError, match="k 0"):
        retriever.search(question, 0)


def test_read_documents_stops_at_a_paragraph_budget(tmp_path):
    first = tmp_path / "first.txt"
    first.write_text("a1\na2\n\nb1\n\nc1\nc2\nc3\n\nd1\n", encoding="utf-8")
    broken = tmp_path / "broken.jsonl"
    broken.write_text("not json\n", encoding="utf-8")
    assert read_documents([first], max_paragraphs=3).texts == ["a1\na2", "b1"]
    assert read_documents([first], max_paragraphs=4).texts == ["a1\na2", "b1", "c1\nc2\nc3"]  # whole documents
    # The budget spent in the first file: the second is never parsed.
    found = read_documents([first, broken], max_paragraphs=2)
    assert found.texts == ["a1\na2"] and found.paragraphs() == 2
    with pytest.raises(ConfigError, match="max_paragraphs 0"):
        read_documents([first], max_paragraphs=0)


def test_distractors_from_an_index_dir_and_files_share_one_budget(slices, tmp_path):
    news = read_documents([slices[2]])
    Index.build(news.texts[:5], news.ids[:5], path=tmp_path / "index")
    found = distractor_documents([str(tmp_path / "index"), str(slices[2])], max_paragraphs=None)
    assert found.texts == news.texts[:5] + news.texts and found.ids[:5] == news.ids[:5]
    capped = distractor_documents([str(tmp_path / "index"), str(slices[2])], max_paragraphs=3)
    assert capped.description["paragraph_lines"] >= 3 and len(capped.texts) <= 3


@pytest.mark.slow  # over a CPU second: the quick loop keeps this file's cheaper tests
def test_each_answer_is_the_one_predict_and_answer_from_index_give(model, slices):
    """The model's cell of one reading of the first five passages answers as the package does: a document as
    QAModel.predict answers it, a collection question as answer_from_index does."""
    sets = {name: read_squad(str(path), misaligned="keep").examples for name, path in
            (("arcd6", slices[0]), ("mlqa4", slices[1]))}
    run = OpenRun(OpenOptions(documents=3, collection=True, distractors=(str(slices[2]),)), sets, seed=0,
                  batch_size=8, log=lambda message: None)
    examples = sets["arcd6"][::9]
    documents, _ = run.records(model, "documents", "bm25", "arcd6", examples)
    asked = document_examples(examples, sets["arcd6"], 3, seed=0)
    predicted = model.predict(asked, batch_size=8)
    for record, example, answers in zip(documents, asked, predicted, strict=True):
        assert len(example["context"]) > 4000 and not record["read_whole"]
        assert record["prediction"] == answers[0].text
        shift = example["paragraph_start"]
        inside = shift <= answers[0].start and answers[0].end <= shift + len(example["paragraph"])
        assert record["prediction_start"] == (answers[0].start - shift if inside else None)
        assert record["grid"]["3/1.5"] == [record[key] for key in ("soqal_em", "soqal_f1", "arabic_f1")]
        hits = rank_passages(example["question"], example["context"], k=20)
        start = example["answers"]["answer_start"][0]
        holding = [r for r, h in enumerate(hits, 1) if h.passage.start <= start < h.passage.end]
        assert record["gold_rank"] == (holding[0] if holding else None)
    collection, negatives = run.records(model, "collection", "bm25", "arcd6", examples)
    full = run.collection.full
    index = Index.build(full.texts, full.ids, full.titles)
    from_index = answer_from_index(model, index, [e["question"] for e in examples], 8, 1, False)
    for record, example, answers in zip(collection, examples, from_index, strict=True):
        assert record["prediction"] == answers[0].text and record["document"] == answers[0].document
        own = answers[0].document == full.ids[run.collection.position[example["context"]]]
        assert record["prediction_start"] == (answers[0].start if own else None)
        assert (record["gold_rank"] == 1) == (index.search(example["question"], 1)[0].passage.document
                                              == run.collection.position[example["context"]])
    # The withheld articles' questions were asked of the collection without their paragraphs.
    withheld = [e for e in examples if ("arcd6", e["title"]) in run.collection.withheld]
    assert [n["id"] for n in negatives] == [e["id"] for e in withheld]
    partial = run.collection.partial
    assert all(e["context"] not in partial.texts for e in withheld)
    assert len(partial.texts) < len(full.texts) and set(partial.texts) <= set(full.texts)


def test_no_answer_scores_at_a_threshold_and_along_the_curve():
    records = [{"null_margin": margin, "soqal_f1": 1.0, "arabic_f1": 0.5} for margin in (-3.0, -1.0, 0.5, 2.0)]
    records.append({"null_margin": None, "soqal_f1": 0.0, "arabic_f1": 0.0})  # nothing read: no answer
    negatives = [{"null_margin": margin} for margin in (-2.0, 1.0, 3.0, None)]
    found = no_answer_summary(records, negatives, threshold=0.0, resamples=200, seed=0)
    at = found["at_model_threshold"]
    assert at["answered"] == pytest.approx(40.0)  # -3 and -1 of five
    assert at["has_ans_f1"] == {"soqal": pytest.approx(40.0), "arabic": pytest.approx(20.0)}
    assert at["no_ans_accuracy"]["mean"] == pytest.approx(75.0)  # 1, 3 and none refused
    keep = {point["keep"]: point for point in found["curve"]}
    assert keep[0.8]["threshold"] == 2.0 and keep[0.8]["answered"] == pytest.approx(80.0)
    assert keep[0.8]["no_ans_accuracy"]["mean"] == pytest.approx(50.0)
    assert no_answer_summary(records, [], 0.0, 200, 0) is None


def test_open_settings_refuse_what_cannot_run(slices, tmp_path, capsys):
    data = ["--data", str(slices[0])]
    cases = [
        (["--predictions", str(slices[0]), "--documents", "2"], "give --model"),
        (["--model", "arabert", "--documents", "0"], "--documents 0"),
        (["--model", "arabert", "--collection", "--retrievers", "bm25,dense"], "--retrievers"),
        (["--model", "arabert", "--distractors", str(slices[2])], "give --collection"),
        (["--model", "arabert", "--collection", "--withhold", "1"], "--withhold 1"),
        (["--model", "arabert", "--backend", "onnx", "--device", "cuda"], "runs on the CPU"),
        (["--task", "ner", "--model", "arabert", "--collection"], "are QA's"),
    ]
    for flags, message in cases:
        out = tmp_path / "never"
        assert main(["evaluate", *flags, *data, "-o", str(out), *FAST]) == 2, flags
        assert message in capsys.readouterr().err, flags
        assert not out.exists()


@pytest.mark.slow
def test_evaluate_documents_and_collection_end_to_end(slices, tmp_path, capsys):
    out = tmp_path / "report"
    args = ["evaluate", "--model", "arabert", "--backend", "onnx", "--data", str(slices[0]), "--data",
            str(slices[1]), "--limit", "5", "--documents", "2", "--collection", "--distractors", str(slices[2]),
            "--distractor-paragraphs", "100", "-o", str(out), *FAST]
    assert main(args) == 0
    results = load.load_results(out)
    found = results["open"]
    labels = ["arabert-mini documents-2 bm25", "arabert-mini documents-2 tfidf", "arabert-mini collection bm25",
              "arabert-mini collection tfidf"]
    assert list(found["pooled"]) == ["arabert-mini", *labels]
    assert found["collection"]["distractors"]["paragraph_lines"] >= 100
    for label in labels:
        row = found["pooled"][label]
        assert row["questions"] == 10
        assert {cell["passages_read"] for cell in row["grid"]} == {1, 2, 3, 5}
        assert {cell["null_weight"] for cell in row["grid"]} == {0.0, 1.0, 1.5, 2.0}
        own = next(c for c in row["grid"] if (c["passages_read"], c["null_weight"]) == (3, 1.5))
        assert own["soqal_f1"]["mean"] == pytest.approx(row["scores"]["soqal_f1"]["mean"])
        assert 0 <= row["recall"]["@1"]["mean"] <= row["recall"]["@5"]["mean"] <= row["recall"]["@20"]["mean"]
        diff = row["paired_vs_paragraph"]["soqal_f1"]["diff"]
        assert diff == pytest.approx(row["scores"]["soqal_f1"]["mean"]
                                     - found["pooled"]["arabert-mini"]["scores"]["soqal_f1"]["mean"])
        assert row["ms"]["end_to_end"]["mean"] > row["ms"]["retrieval"]["mean"] > 0
        for dataset in ("arcd6", "mlqa4"):
            assert label in results["datasets"][dataset]["systems"]
            records = load.load_per_question(out, dataset, label)
            assert len(records) == 5 and all("gold_rank" in r and "grid" in r for r in records)
    assert found["pooled"]["arabert-mini collection bm25"]["no_answer"] is not None
    negatives = [json.loads(line) for path in (out / "no_answer").rglob("*.jsonl.gz")
                 for line in gzip.decompress(path.read_bytes()).decode("utf-8").splitlines()]
    assert negatives and all("null_margin" in n for n in negatives)
    table = (out / "table.md").read_text(encoding="utf-8")
    assert "## Documents and collections" in table and "TF-IDF (SOQAL)" in table and "null weight 1.5" in table
    # The paragraph-given answers are the plain run's: timing them one by one changes nothing.
    plain = tmp_path / "plain"
    assert main(["evaluate", "--model", "arabert", "--backend", "onnx", "--data", str(slices[0]), "--limit", "5",
                 "-o", str(plain), *FAST]) == 0
    assert [r["prediction"] for r in load.load_per_question(plain, "arcd6", "arabert-mini")] == \
        [r["prediction"] for r in load.load_per_question(out, "arcd6", "arabert-mini")]
    # Seeded: a second run answers alike.
    again = tmp_path / "again"
    assert main([*args[:-len(FAST) - 2], "-o", str(again), *FAST]) == 0
    for label in labels:
        first = [r["prediction"] for r in load.load_per_question(out, "mlqa4", label)]
        assert first == [r["prediction"] for r in load.load_per_question(again, "mlqa4", label)]
    capsys.readouterr()



def test_a_report_with_the_documents_benchmark_beside_it_can_be_rerun(tmp_path):
    """bench_documents.py writes bench.json into the report it times (docs/experiments/documents.md): `evaluate
    --overwrite` replaces that directory instead of refusing it as someone else's."""
    from arabert_pipeline.evaluate.cli import REPORT_OUTPUT_NAMES
    from arabert_pipeline.outputs import OutputKind, claim_output_dir

    for name in ("results.json", "table.md", "bench.json"):
        (tmp_path / name).write_text("{}", encoding="utf-8")
    assert claim_output_dir(tmp_path, OutputKind("evaluate", REPORT_OUTPUT_NAMES, markers=("results.json",)),
                            overwrite=True)
