"""make-synthetic-qa: typed questions answered in another paragraph, the leakage guard, resume, the verb's errors."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from arabert_pipeline.errors import ArabertPipelineError
from arabert_pipeline.qa.cloze import Candidate, Gazetteers, find_candidates, make_question
from arabert_pipeline.qa.leakage import normalize
from arabert_pipeline.qa.synthetic import SyntheticConfig, make_synthetic_qa

PEOPLE = ["بشار الأسد", "ديفيد كاميرون", "باراك أوباما", "خالد الفيصل"]
CITIES = ["جدة", "بيرمنغهام", "الرياض", "تبوك"]
YEARS = ["2011", "2013", "2015", "2009"]


def document(i: int) -> str:
    person, city, year = PEOPLE[i % 4], CITIES[i % 4], YEARS[i % 4]
    visitors = f"{i + 3} آلاف زائر"
    return "\n".join([
        f"افتتاح معرض الكتاب الدولي رقم {i}",
        f"وصل الرئيس {person} إلى مدينة {city} صباح اليوم، وافتتح في عام {year} معرضا كبيرا للكتاب زاره {visitors} "
        f"خلال أيامه الأولى بحسب بيان أصدرته وزارة الثقافة والإعلام في المدينة.",
        f"ويعد المعرض الذي دشنه {person} في {city} منذ {year} من أكبر معارض المنطقة، واستقبل نحو {visitors} من "
        f"مختلف المدن والقرى القريبة، كما شاركت وزارة الثقافة والإعلام في تنظيمه مع عدد من دور النشر العربية.",
        f"وأضاف المنظمون أن الدورة رقم {i} شهدت توقيع عشرات الكتب الجديدة وندوات فكرية متنوعة حضرها جمهور كبير.",
    ] + ([UNIQUE] if i == 2 else []))


UNIQUE = "واختتمت الفعاليات بأمسية شعرية أحياها شعراء شباب قدموا قصائد عن البحر والصحراء والحنين إلى الطفولة الأولى."


@pytest.fixture
def corpus(tmp_path) -> list[str]:
    files = []
    for part in range(2):
        path = tmp_path / f"news-{part}.txt"
        path.write_text("\n\n".join(document(part * 8 + i) for i in range(8)) + "\n", encoding="utf-8")
        files.append(str(path))
    return files


def run(corpus, output, hold_out=(), **options):
    options.setdefault("progress", False)
    options.setdefault("min_context_words", 30)  # the toy documents are short: ~50 words outside a question's own
    return make_synthetic_qa(SyntheticConfig(corpus=list(corpus), output=str(output), hold_out=list(hold_out),
                                             **options))


def questions(path: Path) -> list[dict]:
    data = json.loads(path.read_text(encoding="utf-8"))
    return [{"context": p["context"], "title": a["title"], **q}
            for a in data["data"] for p in a["paragraphs"] for q in p["qas"]]


def test_every_type_is_found_and_asked_with_its_question_word(corpus, tmp_path):
    report = run(corpus, tmp_path / "syn.json", max_per_document=10)
    written = questions(tmp_path / "syn.json")
    assert report.questions == len(written) > 0
    assert {q["answer_type"] for q in written} == {"date", "number", "person", "place", "organisation"}
    words = {"date": "متى", "number": "كم", "person": "من", "place": "أين", "organisation": "أي"}
    for q in written:
        assert q["question"].split()[0] == words[q["answer_type"]] and q["question"].endswith("؟")
        answer = q["answers"][0]
        assert q["context"][answer["answer_start"]:][: len(answer["text"])] == answer["text"]
    by_type = {q["answer_type"]: {q["answers"][0]["text"] for q in written if q["answer_type"] == t}
               for t in words for q in written if q["answer_type"] == t}
    assert by_type["person"] <= set(PEOPLE) and by_type["person"]
    assert by_type["date"] <= set(YEARS) and by_type["place"] <= set(CITIES)
    assert by_type["organisation"] <= {"وزارة الثقافة والإعلام", "وزارة الثقافة"}
    assert all(t.endswith("آلاف زائر") for t in by_type["number"])


def test_no_answer_or_question_clause_is_copied_and_the_context_is_another_paragraph(corpus, tmp_path):
    run(corpus, tmp_path / "syn.json", max_per_document=10)
    paragraphs = [p for path in corpus for p in Path(path).read_text(encoding="utf-8").splitlines() if p]
    for q in questions(tmp_path / "syn.json"):
        assert normalize(q["answers"][0]["text"]) not in normalize(q["question"])
        clause = normalize(q["question"].split(" ", 1)[1])
        assert clause not in normalize(q["context"])
        # the context is made of whole corpus paragraphs, none of them the one the question came from
        holders = [p for p in paragraphs if p in q["context"]]
        assert holders and not any(clause.split()[0] in normalize(p) and clause in normalize(p) for p in holders)


def test_question_drops_the_answer_with_its_lead_words():
    sentence = "وقالت الوزارة إن الحكومة افتتحت في عام 2015 أكبر مستشفى في البلاد"
    [candidate] = find_candidates(sentence, Gazetteers(set(), set(), set()), ("date",))
    assert candidate.answer == "2015"
    question = make_question(sentence, candidate, 8)
    assert question == "متى قالت الوزارة إن الحكومة افتتحت أكبر مستشفى في البلاد؟"
    # a year is never taken alone, without a word that makes it one
    assert find_candidates("بلغ عدد المشاركين 2015 مشاركا", Gazetteers(set(), set(), set()), ("date",)) == []
    numbers = find_candidates("بلغ عدد الزوار 7 ملايين زائر في 2015", Gazetteers(set(), set(), set()), ("number",))
    assert [c.answer for c in numbers] == ["7 ملايين زائر"]
    assert make_question("كان", Candidate("date", "2015", 0, 4, 0, 4), 8) is None


def test_documents_in_a_hold_out_set_give_no_question(corpus, tmp_path):
    leaked = UNIQUE  # a paragraph of document 2 only
    squad = {"data": [{"title": "held out", "paragraphs": [{"context": leaked, "qas": [
        {"id": "h1", "question": "عن ماذا القصائد؟",
         "answers": [{"text": "البحر", "answer_start": leaked.index("البحر")}]}
    ]}]}]}
    hold_out = tmp_path / "held.json"
    hold_out.write_text(json.dumps(squad, ensure_ascii=False), encoding="utf-8")
    clean = run(corpus, tmp_path / "all.json", max_per_document=10)
    guarded = run(corpus, tmp_path / "guarded.json", [str(hold_out)], max_per_document=10)
    assert guarded.held_out_documents == 1 and clean.held_out_documents == 0
    kept = {q["id"].rsplit("-", 1)[0] for q in questions(tmp_path / "guarded.json")}
    assert "syn-000-000002" not in kept
    assert "syn-000-000002" in {q["id"].rsplit("-", 1)[0] for q in questions(tmp_path / "all.json")}


def _hold_out(path: Path, context: str) -> Path:
    squad = {"data": [{"title": "held out", "paragraphs": [{"context": context, "qas": [
        {"id": "h1", "question": "عن ماذا؟", "answers": [{"text": context.split()[1], "answer_start":
                                                         context.index(context.split()[1])}]}]}]}]}
    path.write_text(json.dumps(squad, ensure_ascii=False), encoding="utf-8")
    return path


def interrupt_at_the_second_input(monkeypatch, corpus):
    """Ctrl-C while the run reads its second input (after the gazetteer pass has read both): the real reader and the
    paths read so far."""
    import arabert_pipeline.qa.synthetic as synthetic

    real = synthetic.read_documents
    calls: list[str] = []

    def failing(path, progress=True):
        calls.append(path)
        if path == corpus[1] and len(calls) > 2:
            raise KeyboardInterrupt
        yield from real(path, progress)

    monkeypatch.setattr(synthetic, "read_documents", failing)
    return real, calls


def test_a_resumed_run_remakes_its_parts_when_the_hold_out_file_changed(corpus, tmp_path, monkeypatch):
    """Issue 52: the parts recorded the hold-out set by name and question count; a file of the same name and count
    that now holds a corpus paragraph must leave that document out of the resumed run too."""
    import arabert_pipeline.qa.synthetic as synthetic

    held = _hold_out(tmp_path / "held.json", "قصيدة عن الجبال والوديان كتبها شاعر مجهول في قرية بعيدة عن المدن")
    real, _ = interrupt_at_the_second_input(monkeypatch, corpus)
    with pytest.raises(KeyboardInterrupt):
        run(corpus, tmp_path / "resumed.json", [str(held)], max_per_document=10)
    monkeypatch.setattr(synthetic, "read_documents", real)
    _hold_out(held, UNIQUE)  # a paragraph of document 2 only, in the first input: its part must be made again
    resumed = run(corpus, tmp_path / "resumed.json", [str(held)], max_per_document=10, resume=True)
    fresh = run(corpus, tmp_path / "fresh.json", [str(held)], max_per_document=10)
    assert fresh.held_out_documents == 1 and resumed.held_out_documents == 1
    assert questions(tmp_path / "resumed.json") == questions(tmp_path / "fresh.json")


def test_an_interrupted_run_resumes_from_its_finished_inputs(corpus, tmp_path, monkeypatch):
    import arabert_pipeline.qa.synthetic as synthetic

    run(corpus, tmp_path / "whole.json")
    real, calls = interrupt_at_the_second_input(monkeypatch, corpus)
    with pytest.raises(KeyboardInterrupt):
        run(corpus, tmp_path / "resumed.json")
    assert not (tmp_path / "resumed.json").exists() and (tmp_path / "resumed.json.parts" / "000.json").exists()
    with pytest.raises(ArabertPipelineError, match="--resume"):
        run(corpus, tmp_path / "resumed.json")
    monkeypatch.setattr(synthetic, "read_documents", lambda path, progress=True: (calls.append(path), real(path))[1])
    calls.clear()
    run(corpus, tmp_path / "resumed.json", resume=True)
    assert calls == [corpus[1]]  # the gazetteer and the first input were not read again
    assert questions(tmp_path / "resumed.json") == questions(tmp_path / "whole.json")
    assert not (tmp_path / "resumed.json.parts").exists()


def test_limit_samples_whole_documents_and_output_is_not_replaced(corpus, tmp_path):
    whole = run(corpus, tmp_path / "all.json")
    report = run(corpus, tmp_path / "few.json", limit=5)
    few = questions(tmp_path / "few.json")
    assert whole.questions > 5 and 0 < report.questions == len(few) <= 5
    documents = {q["id"].rsplit("-", 1)[0] for q in few}
    assert sum(1 for q in questions(tmp_path / "all.json") if q["id"].rsplit("-", 1)[0] in documents) == len(few)
    with pytest.raises(ArabertPipelineError, match="exists"):
        run(corpus, tmp_path / "few.json")
    with pytest.raises(ArabertPipelineError, match="--types"):
        run(corpus, tmp_path / "x.json", types=("colour",))


def test_the_verb_writes_and_reports_counts(corpus, tmp_path, capsys):
    from arabert_pipeline.cli import main

    out = tmp_path / "cli.json"
    missing = corpus[0].replace(".txt", ".none")
    assert main(["make-synthetic-qa", *corpus, "-o", str(out), "--hold-out", missing, "--no-progress"]) == 2
    assert missing in capsys.readouterr().err and not out.exists()
    assert main(["make-synthetic-qa", *corpus, "-o", str(out), "--hold-out", str(_empty_squad(tmp_path)),
                 "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert f"{len(questions(out))} questions" in printed and "person" in printed


def _empty_squad(tmp_path: Path) -> Path:
    path = tmp_path / "tiny-dev.json"
    context = "هذا نص قصير عن موضوع آخر تماما لا علاقة له بالمعرض."
    path.write_text(json.dumps({"data": [{"title": "t", "paragraphs": [{"context": context, "qas": [
        {"id": "d1", "question": "عن ماذا النص؟",
         "answers": [{"text": "موضوع", "answer_start": context.index("موضوع")}]}
    ]}]}]}, ensure_ascii=False), encoding="utf-8")
    return path


def test_a_file_it_did_not_write_is_never_replaced_and_a_failed_start_blocks_nothing(corpus, tmp_path):
    mine = tmp_path / "notes.txt"
    mine.write_text("precious\n", encoding="utf-8")
    for flag in ("resume", "overwrite"):
        with pytest.raises(ArabertPipelineError, match="was not written by make-synthetic-qa"):
            run(corpus, mine, **{flag: True})
    assert mine.read_text(encoding="utf-8") == "precious\n"
    bad = tmp_path / "cp1256.txt"
    bad.write_bytes("نص".encode("cp1256") + b"\n")
    with pytest.raises(ArabertPipelineError, match="UTF-8"):
        run([bad], tmp_path / "fixed.json")
    run(corpus, tmp_path / "fixed.json")  # the failed start left nothing to resume: no flag needed
    assert questions(tmp_path / "fixed.json")
    with pytest.raises(ArabertPipelineError, match="finished: nothing to resume"):
        run(corpus, tmp_path / "fixed.json", resume=True)
    run(corpus, tmp_path / "fixed.json", overwrite=True)  # its own output: replaced


def test_a_corpus_that_gives_no_question_is_an_error_that_leaves_nothing_behind(tmp_path):
    empty = tmp_path / "short.txt"
    empty.write_text("خبر قصير\n\nخبر آخر\n", encoding="utf-8")
    for _ in range(2):  # the second run is refused for the same reason, not sent to --resume
        with pytest.raises(ArabertPipelineError, match="no question could be made from the corpus"):
            run([str(empty)], tmp_path / "none.json")
    assert not (tmp_path / "none.json").exists() and not (tmp_path / "none.json.parts").exists()


def test_a_preprocessed_or_repeated_corpus_is_refused(corpus, tmp_path):
    segmented = tmp_path / "segmented.txt"
    segmented.write_text("و+ قال ال+ رئيس\n", encoding="utf-8")
    segmented.with_name("segmented.txt.arabert_pipeline.json").write_text('{"preprocessing": "arabertv2"}',
                                                                           encoding="utf-8")
    with pytest.raises(ArabertPipelineError, match="segmented.txt: preprocessed with 'arabertv2'"):
        run([str(segmented)], tmp_path / "a.json")
    with pytest.raises(ArabertPipelineError, match="given more than once"):
        run([corpus[0], corpus[0]], tmp_path / "b.json")


def test_contexts_reach_the_minimum_length_and_clauses_split_by_the_answer_are_caught(corpus, tmp_path):
    from arabert_pipeline.qa.synthetic import _copied

    run(corpus, tmp_path / "syn.json", max_per_document=10, min_context_words=40)
    written = questions(tmp_path / "syn.json")
    assert written and min(len(q["context"].split()) for q in written) >= 40
    context = "وقالت الشركة إنها تضخم أرباحها بشكل وهمي بقيمة 150 مليار ين منذ سنوات"
    assert _copied("تضخم أرباحها بشكل وهمي بقيمة ين", context)  # the answer (150 مليار) was in the middle
    assert not _copied("أعلنت الحكومة خطة جديدة للتعليم", context)
