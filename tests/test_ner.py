"""NER data and scores (issue 40): CoNLL files read with one-line errors naming the file and line (a tag sequence that
is not BIO, a bad line, an empty file), the seqeval-style repair when asked, and entity-level scores, alone and in
`evaluate --task ner`, equal to seqeval's on random tag sequences; words mapped to tokens through the preprocessing."""
from __future__ import annotations

import json

import numpy as np
import pytest

from arabert_pipeline.errors import InputError
from arabert_pipeline.ner.data import read_conll, repair_bio
from arabert_pipeline.ner.metrics import entities, ner_report

seqeval = pytest.importorskip("seqeval.metrics")


def write(tmp_path, content: str, name: str = "a.conll"):
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    return path


def test_sentences_are_read_with_their_tags(tmp_path):
    path = write(tmp_path, "-DOCSTART-\tO\n\nزار\tO\nماكرون\tB-PERS\nبيروت\tB-LOC\n\n\nفي\tO\nالأمم\tB-ORG\n"
                           "المتحدة\tI-ORG\r\n")
    read = read_conll(path)
    assert [(e["id"], e["words"], e["tags"]) for e in read.examples] == [
        ("3", ["زار", "ماكرون", "بيروت"], ["O", "B-PERS", "B-LOC"]),
        ("8", ["في", "الأمم", "المتحدة"], ["O", "B-ORG", "I-ORG"])]
    assert read.types == ["LOC", "ORG", "PERS"]


@pytest.mark.parametrize("content, message", [
    ("زار\tO\nماكرون\tI-PERS\n", r"a\.conll: line 2: tag I-PERS after O: not BIO \(an entity starts with B-PERS\); "
                                 r"pass --repair-bio"),
    ("الأمم\tB-ORG\nالمتحدة\tI-LOC\n", r"a\.conll: line 2: tag I-LOC after B-ORG: not BIO"),
    ("\nماكرون\tI-PERS\n", r"a\.conll: line 2: tag I-PERS after O: not BIO"),
    ("زار\tO\nماكرون\tS-PERS\n", r"a\.conll: line 2: tag 'S-PERS': expected O, B-TYPE or I-TYPE"),
    ("زار\tO\nماكرون B-PERS\n", r"a\.conll: line 2: expected token<TAB>tag, got 1 tab-separated field\(s\)"),
    ("زار\tO\n\tO\n", r"a\.conll: line 2: empty token"),
    ("", r"a\.conll: no sentences in the file \(it is empty\)"),
    ("\n\n-DOCSTART-\tO\n\n", r"a\.conll: no sentences in the file"),
])
def test_bad_files_are_one_line_errors_naming_file_and_line(tmp_path, content, message):
    with pytest.raises(InputError, match=message):
        read_conll(write(tmp_path, content))


def test_repair_reads_a_stray_inside_tag_as_seqeval_does_and_reports_it(tmp_path):
    path = write(tmp_path, "زار\tO\nماكرون\tI-PERS\nو\tO\nالأمم\tB-ORG\nالمتحدة\tI-LOC\n")
    read = read_conll(path, "repair")
    assert read.examples[0]["tags"] == ["O", "B-PERS", "O", "B-ORG", "B-LOC"]
    assert [(r["line"], r["tag"], r["read_as"]) for r in read.misaligned] == [(2, "I-PERS", "B-PERS"),
                                                                               (5, "I-LOC", "B-LOC")]
    # Scored as seqeval chunks the original tags: the repair changes nothing in the entities.
    original = ["O", "I-PERS", "O", "B-ORG", "I-LOC"]
    assert entities(original) == entities(read.examples[0]["tags"]) == {("PERS", 1, 2), ("ORG", 3, 4), ("LOC", 4, 5)}


TAGS = ["O", "O", "O", "B-PERS", "I-PERS", "B-LOC", "I-LOC", "B-ORG", "I-ORG", "B-MISC"]


def random_tags(rng, sentences: int) -> list[list[str]]:
    """Tag sequences with stray I- tags too (seqeval chunks them as entities; so must we)."""
    return [list(rng.choice(TAGS, rng.integers(1, 12))) for _ in range(sentences)]


def noisy_copy(rng, gold: list[list[str]], keep: float) -> list[list[str]]:
    return [[t if rng.random() < keep else str(rng.choice(TAGS)) for t in tags] for tags in gold]


@pytest.mark.parametrize("seed", range(5))
def test_entity_scores_are_seqevals(seed):
    rng = np.random.default_rng(seed)
    gold = random_tags(rng, 60)
    predicted = noisy_copy(rng, gold, 0.7)
    report = ner_report(gold, predicted)
    assert report["micro_f1"] == pytest.approx(100 * seqeval.f1_score(gold, predicted))
    assert report["micro_precision"] == pytest.approx(100 * seqeval.precision_score(gold, predicted))
    assert report["micro_recall"] == pytest.approx(100 * seqeval.recall_score(gold, predicted))
    assert report["macro_f1"] == pytest.approx(100 * seqeval.f1_score(gold, predicted, average="macro"))
    theirs = seqeval.classification_report(gold, predicted, output_dict=True, zero_division=0)
    for kind, scores in report["per_type"].items():
        assert scores["f1"] == pytest.approx(100 * theirs[kind]["f1-score"])
        assert scores["support"] == theirs[kind]["support"]


def test_evaluate_scores_systems_as_seqeval_with_cis_and_paired_differences(tmp_path):
    from arabert_pipeline.evaluate.tasks import TaskEvaluateConfig, run_task_evaluation

    rng = np.random.default_rng(3)
    gold = random_tags(rng, 120)
    for tags in gold:  # in BIO, as a file must be
        repair_bio(tags)
    data = write(tmp_path, "".join("".join(f"ك{j}\t{t}\n" for j, t in enumerate(tags)) + "\n" for tags in gold))
    ids = [e["id"] for e in read_conll(data).examples]
    weak, strong = noisy_copy(rng, gold, 0.6), noisy_copy(rng, gold, 0.95)
    files = []
    for name, predicted in (("weak", weak), ("strong", strong)):
        files.append(write(tmp_path, "".join(json.dumps({"id": i, "tags": p}) + "\n"
                                             for i, p in zip(ids, predicted, strict=True)), f"{name}.jsonl"))
    results = run_task_evaluation(TaskEvaluateConfig(
        task="ner", data=[str(data)], out=tmp_path / "out", systems=[("predictions", str(f)) for f in files],
        resamples=500), log=lambda _: None)
    rows = results["datasets"][str(data)]["systems"]
    for name, predicted in (("weak.jsonl", weak), ("strong.jsonl", strong)):
        scores = rows[name]["scores"]
        assert scores["micro_f1"] == pytest.approx(100 * seqeval.f1_score(gold, predicted))
        assert scores["macro_f1"] == pytest.approx(100 * seqeval.f1_score(gold, predicted, average="macro"))
        for metric, (low, high) in rows[name]["ci"].items():
            assert low < scores[metric] < high
    paired = rows["strong.jsonl"]["vs_reference"]["micro_f1"]  # the reference (weak) minus this one
    assert paired["diff"] == pytest.approx(rows["weak.jsonl"]["scores"]["micro_f1"]
                                           - rows["strong.jsonl"]["scores"]["micro_f1"])
    assert paired["high"] < 0 and paired["p_value"] < 0.05


def test_words_reach_their_first_token_through_farasa_segmentation():
    """A word Farasa splits into segments (`وبمدينة` → `و+ ب+ مدين +ة`) owns all of their tokens; its label sits on the
    first one; a word the preprocessing deletes has none."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    from arabert_pipeline.finetuning.tokenizer_adapter import TokenizerAdapter
    from arabert_pipeline.ner.align import WordEncoder, word_spans
    from arabert_pipeline.preprocess import Preprocessor

    text = "وَبمدينةِ الرياض 😀 كتبوها"
    preprocessor = Preprocessor("arabertv2")
    segmented = preprocessor.preprocess_batch([text])[0]
    vocabulary = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3}
    for piece in segmented.split():
        vocabulary.setdefault(piece, len(vocabulary))
    backend = Tokenizer(models.WordLevel(vocabulary, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    encoder = WordEncoder(TokenizerAdapter(backend), preprocessor, 64, "arabertv2")
    spans = word_spans(text)
    assert [text[s:e] for s, e in spans] == ["وَبمدينةِ", "الرياض", "😀", "كتبوها"]
    (sentence,) = encoder.encode([text], [spans])
    (piece,) = sentence.pieces
    tokens = [backend.id_to_token(i) for i in piece.ids]
    assert piece.words == [0, 1, 3] and sentence.untokenized == 1  # the emoji has no token
    firsts = [tokens[p] for p in piece.positions]
    assert firsts[0] == segmented.split()[0] == "و+"  # the first segment's token carries the word's label
    assert firsts[1] == "ال+" and firsts[2].startswith("كتب")


@pytest.mark.parametrize("lines, message", [
    (['{"id": "1", "tags": ["O", "X", "B-LOC"]}'],
     r"p\.jsonl: line 1: tags\[1\]: tag 'X': expected O, B-TYPE or I-TYPE"),
    (['{"id": "1", "tags": ["O", "O"]}'], r"p\.jsonl: line 1: id 1: 2 tags for a sentence of 3 words"),
    (['{"id": "1", "tags": ["O", "B-MISC", "B-LOC"]}'],
     r"p\.jsonl: line 1: tags\[1\]: tag 'B-MISC': MISC is not an entity type of the data \(LOC, PERS\)"),
    (['{"id": "1", "tags": ["O", "O", "O"]}', '{"id": "1", "tags": ["O", "O", "O"]}'],
     r"p\.jsonl: line 2: id: a second prediction for id 1 \(the first is on line 1\)"),
])
def test_a_bad_predictions_file_is_refused_naming_its_line(tmp_path, lines, message):
    from arabert_pipeline.evaluate.tasks import TaskEvaluateConfig, run_task_evaluation

    data = write(tmp_path, "زار\tO\nماكرون\tB-PERS\nبيروت\tB-LOC\n")
    predictions = write(tmp_path, "\n".join(lines) + "\n", "p.jsonl")
    with pytest.raises(InputError, match=message):
        run_task_evaluation(TaskEvaluateConfig(task="ner", data=[str(data)], out=tmp_path / "out",
                                               systems=[("predictions", str(predictions))], resamples=100),
                            log=lambda _: None)


def test_a_joiner_at_a_words_edge_is_not_part_of_it():
    from arabert_pipeline.ner.align import word_spans

    text = "زار ماكرونُ\u200c بيروت \u200c می\u200cخواهم"
    assert [text[a:b] for a, b in word_spans(text)] == ["زار", "ماكرونُ", "بيروت", "می\u200cخواهم"]
