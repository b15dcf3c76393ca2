"""`arabert-pipeline answer --index DIR` (issue 59): questions asked of a collection, from --question or a JSON lines
file of {"id"?, "question"}, answered as `Pipeline.answer(question, index=...)` answers, each answer naming its
document (id and title) with offsets into that document's text; --context and --demo refused with --index, and a
directory that is not an index, or a damaged one, refused in one line before the model loads. The shipped model."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from arabert_pipeline import Index, Pipeline
from arabert_pipeline.cli import main
from arabert_pipeline.pipeline import cli as answer_cli
from test_passages import FILLER, NILE, PETRA, long_document

# The collection of these tests and of test_serve_index.py: a paragraph, an article of several passages, news.
TEXTS = [PETRA, long_document(NILE, copies=3), *FILLER]
IDS = ["petra", "nile-article", *[f"news-{i}" for i in range(len(FILLER))]]
TITLES = ["البتراء", "نهر النيل", *[None] * len(FILLER)]
NILE_Q, PETRA_Q = "كم يبلغ طول نهر النيل؟", "أين تقع البتراء؟"
BOOK_FAIR_Q = "متى افتتح المعرض الدولي للكتاب؟"  # its paragraph is in three passages: all three are read
UNRETRIEVED = "ما لون السماء؟"  # no term of it in any document: nothing is read, no answer


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("collection") / "index"
    Index.build(TEXTS, IDS, TITLES, path)
    return path


@pytest.fixture(scope="module")
def reference(index_dir):
    """The Pipeline and Index that `answer --index` and /v1/ask must answer as."""
    return Pipeline("arabert"), Index.open(index_dir)


def damaged_copy(source: Path, directory: Path) -> Path:
    """The index `source` copied to `directory` with one byte of its documents changed, its size kept: only
    Index.open's checksums tell."""
    directory.mkdir()
    for part in source.iterdir():
        (directory / part.name).write_bytes(part.read_bytes())
    data = bytearray((directory / "documents.txt").read_bytes())
    data[0] ^= 1
    (directory / "documents.txt").write_bytes(bytes(data))
    return directory


def _run(capsys, *argv):
    code = main(["answer", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_question_is_answered_from_the_collection_naming_its_document(index_dir, reference, capsys):
    qa, index = reference
    expected = qa.answer(PETRA_Q, index=index)
    code, out, err = _run(capsys, "--index", index_dir, "--question", PETRA_Q)
    assert code == 0, err
    assert out == (f"answer: {expected.text}\nscore: {expected.score:.4f}   span: [{expected.start}, {expected.end})\n"
                   "document: petra   title: البتراء\n")
    assert PETRA[expected.start:expected.end] == expected.text and "الأردن" in expected.text


@pytest.mark.slow  # a second model load; the line above is the quick loop's
def test_top_k_answers_from_the_collection_each_name_their_document(index_dir, reference, capsys):
    qa, index = reference
    ranked = qa.answer(NILE_Q, index=index, top_k=2)
    code, out, err = _run(capsys, "--index", index_dir, "--question", NILE_Q, "--top-k", 2)
    assert code == 0, err
    lines = out.splitlines()
    assert [line for line in lines if "answer:" in line] == [f"{rank}. answer: {a.text}"
                                                             for rank, a in enumerate(ranked, start=1)]
    assert lines[2] == "   document: nile-article   title: نهر النيل"


@pytest.mark.slow  # over half a CPU second: the quick loop keeps this file's cheaper tests
def test_a_questions_file_gets_records_naming_documents_and_null_where_withheld(index_dir, reference, tmp_path,
                                                                                capsys):
    qa, index = reference
    source = tmp_path / "questions.jsonl"
    source.write_text("\n".join(json.dumps(record, ensure_ascii=False) for record in [
        {"id": "q-nile", "question": NILE_Q}, {"question": PETRA_Q}, {"id": 7, "question": UNRETRIEVED}]) + "\n",
        encoding="utf-8")
    out_file = tmp_path / "answers.jsonl"
    code, _, err = _run(capsys, "--index", index_dir, "--input", source, "--output", out_file, "--top-k", 2,
                        "--allow-no-answer")
    assert code == 0, err
    records = [json.loads(line) for line in out_file.read_text(encoding="utf-8").splitlines()]
    assert [r["id"] for r in records] == ["q-nile", 2, 7]
    expected = qa.answer([NILE_Q, PETRA_Q, UNRETRIEVED], index=index, top_k=2, allow_no_answer=True)
    for record, found in zip(records, expected, strict=True):
        assert len(record["top_k"]) == len(found)
        for written, answer in zip(record["top_k"], found, strict=True):
            assert written == {"answer": answer.text, "score": round(answer.score, 6), "start": answer.start,
                               "end": answer.end, "document": answer.document, "title": answer.title}
            assert TEXTS[IDS.index(written["document"])][written["start"]:written["end"]] == written["answer"]
    assert (records[0]["document"], records[0]["title"]) == ("nile-article", "نهر النيل")
    assert records[2] == {"id": 7, "answer": None, "score": None, "start": None, "end": None, "document": None,
                          "title": None, "top_k": []}


@pytest.fixture
def no_model_load(monkeypatch):
    """Every refusal below comes before the model loads."""
    def refuse(args):
        raise AssertionError("the model was loaded before the input was refused")

    monkeypatch.setattr(answer_cli, "_load_pipeline", refuse)


def _refused(capsys, *argv) -> str:
    code, out, err = _run(capsys, *argv)
    assert code == 2 and not out, (out, err)
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err


def test_a_context_or_the_demo_with_an_index_is_refused_in_one_line(index_dir, capsys, no_model_load):
    err = _refused(capsys, "--index", index_dir, "--question", PETRA_Q, "--context", PETRA)
    assert "--context: not with --index" in err
    assert "--demo: not with --index" in _refused(capsys, "--index", index_dir, "--demo")
    assert "--question needs --context (or --index DIR" in _refused(capsys, "--question", PETRA_Q)


def test_a_directory_that_is_not_an_index_or_is_damaged_is_refused_before_the_model_loads(index_dir, tmp_path,
                                                                                         capsys, no_model_load):
    assert "is not an index directory: it has no arabert_pipeline.json" in \
        _refused(capsys, "--index", tmp_path, "--question", PETRA_Q)
    assert "is not an index directory (no such directory)" in \
        _refused(capsys, "--index", tmp_path / "missing", "--question", PETRA_Q)
    err = _refused(capsys, "--index", damaged_copy(index_dir, tmp_path / "damaged"), "--question", PETRA_Q)
    assert "documents.txt: its SHA-256 is not the one the index recorded" in err


def test_a_questions_file_line_with_a_context_or_without_a_question_is_named(index_dir, tmp_path, capsys,
                                                                            no_model_load):
    source = tmp_path / "questions.jsonl"
    source.write_text(json.dumps({"question": PETRA_Q}) + "\n" + json.dumps({"question": NILE_Q, "context": NILE})
                      + "\n", encoding="utf-8")
    err = _refused(capsys, "--index", index_dir, "--input", source)
    assert f"{source}: line 2: context: a context is not read with --index" in err
    source.write_text(json.dumps({"id": "a", "text": PETRA_Q}) + "\n", encoding="utf-8")
    assert f"{source}: line 1: question: missing" in _refused(capsys, "--index", index_dir, "--input", source)


def test_answers_are_never_written_into_the_index_directory(index_dir, tmp_path, capsys, no_model_load):
    source = tmp_path / "questions.jsonl"
    source.write_text(json.dumps({"question": PETRA_Q}) + "\n", encoding="utf-8")
    before = sorted(p.name for p in index_dir.iterdir())
    err = _refused(capsys, "--index", index_dir, "--input", source, "--output", index_dir / "answers.jsonl")
    assert "is inside the input" in err
    assert sorted(p.name for p in index_dir.iterdir()) == before
