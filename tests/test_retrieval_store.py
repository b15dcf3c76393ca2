"""The index directory (retrieval/store.py): written atomically under a lock, opened with every file checked, a
killed build resumed to the identical index; and `arabert-pipeline index` over corpus, SQuAD and JSON-lines files."""
from __future__ import annotations

import json
import lzma
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

from arabert_pipeline import Index
from arabert_pipeline.artifacts.metadata import METADATA_FILE
from arabert_pipeline.cli import main
from arabert_pipeline.errors import ConfigError
from arabert_pipeline.outputs import OutputLock
from arabert_pipeline.retrieval import index as index_module
from arabert_pipeline.retrieval.store import FILES, partial_dir
from arabert_pipeline.weights.files import file_digest
from conftest import REPO

TEXTS = [f"الفقرة رقم {i} عن مدينة {city}.\nوفيها حديث عن {topic} وأهله." for i, (city, topic) in enumerate(
    [("القاهرة", "النيل"), ("بيروت", "البحر"), ("دمشق", "الياسمين"), ("بغداد", "دجلة"), ("تونس", "الزيتون"),
     ("الرباط", "المحيط"), ("عمان", "البتراء"), ("الرياض", "الصحراء")])]
IDS = [f"doc-{i}" for i in range(len(TEXTS))]


def files_of(directory: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(directory.iterdir())}


@pytest.fixture
def built(tmp_path) -> Path:
    Index.build(TEXTS, IDS, [f"عنوان {i}" for i in range(len(TEXTS))], tmp_path / "index")
    return tmp_path / "index"


def test_a_written_index_opens_to_the_same_search(built, tmp_path):
    memory = Index.build(TEXTS, IDS, [f"عنوان {i}" for i in range(len(TEXTS))])
    opened = Index.open(built)
    for query in ("مدينة دمشق", "نهر النيل في القاهرة", "الزيتون"):
        assert opened.search(query, 3) == memory.search(query, 3)
    hit = opened.search("البتراء", 1)[0]
    assert (hit.document, hit.title) == ("doc-6", "عنوان 6")
    assert opened.document_text(6)[hit.passage.start:hit.passage.end] == hit.text
    assert (len(opened), opened.documents, opened.analysis, opened.passage_chars) == \
        (8, 8, "arabertv02-light10+qwords", 600)
    assert sorted(p.name for p in built.iterdir()) == sorted([*FILES, METADATA_FILE])
    metadata = json.loads((built / METADATA_FILE).read_text())
    assert metadata["library"] == "bm25s" and metadata["format"] == 1 and metadata["bm25"]["k1"] == 1.5
    assert not partial_dir(built).exists() and not (tmp_path / ".index.lock").exists()


def test_an_index_is_never_written_over(built, tmp_path):
    before = files_of(built)
    for resume in (False, True):  # other documents, or not resumed
        with pytest.raises(ConfigError, match="holds an index already"):
            Index.build(TEXTS if resume else TEXTS[::-1], path=built, resume=resume)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("x")
    with pytest.raises(ConfigError, match="is not empty"):
        Index.build(TEXTS, path=tmp_path / "mine")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="not a directory"):
        Index.build(TEXTS, path=tmp_path / "file")
    assert files_of(built) == before and (tmp_path / "mine" / "notes.txt").read_text() == "x"
    (tmp_path / "empty").mkdir()
    assert len(Index.build(TEXTS, path=tmp_path / "empty")) == 8


def test_a_build_in_progress_holds_the_lock(tmp_path):
    with OutputLock(tmp_path / "index", "index"), pytest.raises(ConfigError, match="in use by PID"):
        Index.build(TEXTS, path=tmp_path / "index")


def _rewrite(directory: Path, name: str, data: bytes, *, record: bool) -> None:
    (directory / name).write_bytes(data)
    if record:  # as if the metadata had been forged to match
        metadata = json.loads((directory / METADATA_FILE).read_text())
        metadata["files"][name] = {"bytes": len(data), "sha256": file_digest(directory / name)}
        (directory / METADATA_FILE).write_text(json.dumps(metadata))


@pytest.mark.parametrize("damage, message", [
    (lambda d: (d / METADATA_FILE).unlink(), "is not an index directory: it has no arabert_pipeline.json"),
    (lambda d: (d / METADATA_FILE).write_text('{"kind": "tokenizer"}'), "not an index .its kind is 'tokenizer'"),
    (lambda d: (d / METADATA_FILE).write_text((d / METADATA_FILE).read_text().replace('"format": 1', '"format": 9')),
     "index format 9 is not one this version reads"),
    (lambda d: (d / METADATA_FILE).write_text("{not json"), "arabert_pipeline.json: invalid JSON"),
    (lambda d: (d / "terms.json").unlink(), "terms.json is missing"),
    (lambda d: (d / "bm25.data.npy").write_bytes((d / "bm25.data.npy").read_bytes()[:-8]),
     r"bm25.data.npy: [\d,]+ bytes where the index recorded"),
    (lambda d: (d / "passages.npy").write_bytes((d / "passages.npy").read_bytes()[:-1] + b"\x07"),
     "passages.npy: its SHA-256 is not the one the index recorded"),
    (lambda d: ((d / "documents.txt").unlink(), (d / "documents.txt").symlink_to("/dev/zero")),
     "documents.txt: not a regular file .it is a character device"),
])
def test_a_damaged_index_is_refused_naming_the_file(built, damage, message):
    damage(built)
    with pytest.raises(ConfigError, match=message):
        Index.open(built)


def test_nothing_is_unpickled_from_an_index_dir(built):
    import io

    buffer = io.BytesIO()
    np.save(buffer, np.array([[0, 1, 2]], dtype=object), allow_pickle=True)
    _rewrite(built, "passages.npy", buffer.getvalue(), record=True)
    with pytest.raises(ConfigError, match="passages.npy: not a numeric .npy array .it holds Python objects"):
        Index.open(built)


def test_checks_beyond_the_checksums(built):
    np.save(built / "p.npy", np.array([[0, 5, 2]] * 8, dtype=np.int64))  # end before start
    _rewrite(built, "passages.npy", (built / "p.npy").read_bytes(), record=True)
    (built / "p.npy").unlink()
    with pytest.raises(ConfigError, match="passages.npy: holds passages outside the documents"):
        Index.open(built)
    size = (built / "terms.json").stat().st_size
    _rewrite(built, "terms.json", b" " * size, record=False)
    with pytest.raises(ConfigError, match="terms.json: its SHA-256"):
        Index.open(built)
    with pytest.raises(ConfigError, match="passages.npy: holds passages outside"):  # sizes only: no checksum
        Index.open(built, verify=False)


def test_an_interrupted_build_is_resumed_only_when_asked_and_only_for_the_same_inputs(tmp_path, monkeypatch):
    monkeypatch.setattr(index_module, "CHUNK_DOCUMENTS", 3)
    calls = []

    def interrupted(texts, first, *args):
        calls.append(first)
        if first == 6:
            raise KeyboardInterrupt
        return analyse_chunk(texts, first, *args)

    analyse_chunk = index_module.analyse_chunk
    monkeypatch.setattr(index_module, "analyse_chunk", interrupted)
    with pytest.raises(KeyboardInterrupt):
        Index.build(TEXTS, IDS, path=tmp_path / "index")
    assert partial_dir(tmp_path / "index").is_dir() and not (tmp_path / "index").exists()
    with pytest.raises(ConfigError, match="holds an interrupted build of .*pass --resume"):
        Index.build(TEXTS, IDS, path=tmp_path / "index")
    with pytest.raises(ConfigError, match="interrupted build of other documents or settings"):
        Index.build(TEXTS[::-1], path=tmp_path / "index", resume=True)
    with pytest.raises(ConfigError, match="interrupted build of other documents or settings"):
        Index.build(TEXTS, IDS, path=tmp_path / "index", resume=True, passage_chars=300)
    monkeypatch.setattr(index_module, "analyse_chunk", analyse_chunk)
    calls.clear()
    monkeypatch.setattr(index_module, "analyse_chunk", lambda *a: calls.append(a[1]) or analyse_chunk(*a))
    Index.build(TEXTS, IDS, path=tmp_path / "index", resume=True)
    assert calls == [6]  # the two saved chunks are read back, not analysed again
    Index.build(TEXTS, IDS, path=tmp_path / "fresh")
    assert files_of(tmp_path / "index") == files_of(tmp_path / "fresh")


# A build of many small documents, a chunk of 5 at a time, that writes a marker once two chunks are saved and then
# slows down, so that the SIGKILL lands in the middle of the build at full speed however slow the test is to send it.
KILLED_BUILD = r"""
import signal, sys, time
signal.signal(signal.SIGINT, signal.SIG_DFL)
from arabert_pipeline import Index
from arabert_pipeline.retrieval import index, store
index.CHUNK_DOCUMENTS = 5
save = store.PartialBuild.save_chunk

def saved(self, number, *parts):
    save(self, number, *parts)
    if number >= 1:
        open(sys.argv[2], "a").write(f"{number}\n")
        time.sleep(0.3)

store.PartialBuild.save_chunk = saved
texts = [line for line in open(sys.argv[3], encoding="utf-8").read().split("\n\n") if line]
Index.build(texts, path=sys.argv[1])
"""


@pytest.mark.slow
def test_a_build_killed_by_sigkill_resumes_to_the_identical_index(tmp_path, monkeypatch):
    texts = [f"{t}\nنسخة {i} من النص" for i in range(6) for t in TEXTS]
    corpus = tmp_path / "texts.txt"
    corpus.write_text("\n\n".join(texts), encoding="utf-8")
    marker = tmp_path / "marker"
    with tempfile.TemporaryFile("w+") as stderr:
        child = subprocess.Popen([sys.executable, "-c", KILLED_BUILD, str(tmp_path / "index"), str(marker),
                                  str(corpus)], env={**os.environ, "PYTHONPATH": str(REPO)}, stderr=stderr)
        try:
            deadline = time.monotonic() + 120
            while not marker.exists():
                assert child.poll() is None, f"the build ended first: {stderr.seek(0) or stderr.read()[-2000:]}"
                assert time.monotonic() < deadline, "the build never saved two chunks"
                time.sleep(0.01)
            child.send_signal(signal.SIGKILL)
            assert child.wait(timeout=60) == -signal.SIGKILL
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
    chunks = sorted(p.name for p in (partial_dir(tmp_path / "index") / "chunks").glob("*.npy"))
    assert 2 <= len(chunks) < len(texts) // 5
    monkeypatch.setattr(index_module, "CHUNK_DOCUMENTS", 5)
    resumed = Index.build(texts, path=tmp_path / "index", resume=True)
    Index.build(texts, path=tmp_path / "fresh")
    assert files_of(tmp_path / "index") == files_of(tmp_path / "fresh")
    assert resumed.search("الياسمين", 1)[0].document == "2"


# --------------------------------------------------------------------------------------------------- the verb

def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_index_verb_reads_corpus_squad_and_json_lines(tmp_path, capsys):
    corpus = tmp_path / "news.txt.xz"
    with lzma.open(corpus, "wt", encoding="utf-8") as f:
        f.write("عنوان الخبر الأول\nفقرة عن القاهرة والنيل.\n\nخبر ثان عن دمشق\n\n\nخبر ثالث عن بغداد\n")
    squad = tmp_path / "set.json"
    squad.write_text(json.dumps({"data": [
        {"title": "الهند", "paragraphs": [{"context": "الهند بلد في آسيا.", "qas": []},
                                          {"context": "عاصمة الهند نيودلهي.", "qas": []}]},
        {"title": "الهند", "paragraphs": [{"context": "نهر الغانج في الهند.", "qas": []}]}]}, ensure_ascii=False))
    lines = tmp_path / "mine.jsonl"
    lines.write_text('{"id": 7, "title": "سبعة", "text": "نص عن الرباط"}\n\n{"text": "نص بلا رقم عن تونس"}\n',
                     encoding="utf-8")
    code, out, err = run_cli(["index", str(corpus), str(squad), str(lines), "-o", str(tmp_path / "ix"),
                              "--no-progress", "--passage-chars", "300"], capsys)
    assert code == 0, err
    assert out.startswith("indexed 8 documents as 8 passages (arabertv02-light10+qwords, ≤ 300 characters) in ")
    assert out.rstrip().endswith("MB)")
    index = Index.open(tmp_path / "ix")
    ids = [index.document_id(i) for i in range(index.documents)]
    assert ids == ["news.txt.xz:1", "news.txt.xz:4", "news.txt.xz:7", "set.json:الهند#0", "set.json:الهند#1",
                   "set.json:الهند#2", "7", "mine.jsonl:3"]
    assert index.document_text(0) == "عنوان الخبر الأول\nفقرة عن القاهرة والنيل."
    assert [index.document_title(i) for i in (0, 5, 6, 7)] == [None, "الهند", "سبعة", None]
    assert index.search("الغانج", 1)[0].document == "set.json:الهند#2"


def index_error(tmp_path, capsys, name: str, content: bytes) -> str:
    """The one-line error of `index` on a file `name` holding `content`; nothing is left behind."""
    (tmp_path / name).write_bytes(content)
    code, out, err = run_cli(["index", str(tmp_path / name), "-o", str(tmp_path / "ix"), "--no-progress"], capsys)
    assert code == 2 and err.count("\n") == 1 and err.startswith("arabert-pipeline index: error: "), err
    assert not (tmp_path / "ix").exists() and not partial_dir(tmp_path / "ix").exists()
    return err


BAD_JSON_LINES = {
    b'{"text": "x"}\n{"text": \n': r"a.jsonl: line 2: invalid JSON",
    b'{"id": "x", "text": "x"}\n{"id": "x", "text": "y"}\n':
        r"a.jsonl line 2: duplicate id 'x' \(also .*a.jsonl line 1\)",
    b'{"title": "t"}\n': r"a.jsonl: line 1: text: missing",
    b'{"text": "  "}\n': r"a.jsonl: line 1: text: empty",
    b'{"text": "x", "id": 1.5}\n': r"a.jsonl: line 1: id: must be a string or an integer",
    b'[1]\n': r"a.jsonl: line 1: expected a JSON object",
}


@pytest.mark.parametrize("content", BAD_JSON_LINES)
def test_bad_json_lines_are_one_line_naming_file_and_line(tmp_path, capsys, content):
    assert re.search(BAD_JSON_LINES[content], index_error(tmp_path, capsys, "a.jsonl", content))


@pytest.mark.parametrize("name, content, message", [
    ("a.txt", b"\xff\xfe bad\n", r"a.txt: line 1: invalid UTF-8 at byte 1"),
    ("a.txt", b"\n\n  \n", r"a.txt: holds no documents"),
    ("a.json", b'{"data": [{"title": "t", "paragraphs": [{"context": ""}]}]}',
     r"a.json: data\[0\].paragraphs\[0\].context: empty context"),
    ("a.json", b'{"data": [{"title": 3, "paragraphs": []}]}', r"a.json: data\[0\].title: expected a string"),
    ("a.json", b'[]', r"a.json: data: not SQuAD JSON"),
])
def test_bad_corpus_and_squad_files_are_one_line_naming_file_and_field(tmp_path, capsys, name, content, message):
    assert re.search(message, index_error(tmp_path, capsys, name, content))


def test_the_verb_refuses_bad_settings_and_outputs(tmp_path, capsys):
    (tmp_path / "a.txt").write_text("نص\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.txt").write_text("نص آخر\n")
    cases = [([], ["--passage-chars", "5"], "--passage-chars 5"),
             ([str(tmp_path / "sub" / "a.txt")], [], "have the same file name"),
             ([], ["-o", str(tmp_path / "a.txt")], "is the input"),
             ([str(tmp_path / "missing.txt")], [], "missing.txt: no such input file")]
    for inputs, flags, message in cases:
        argv = ["index", str(tmp_path / "a.txt"), *inputs, "-o", str(tmp_path / "ix"), "--no-progress", *flags]
        code, out, err = run_cli(argv, capsys)
        assert code == 2 and message in err, err
    assert (tmp_path / "a.txt").read_text() == "نص\n"


def test_resuming_a_finished_build_opens_it_and_clears_what_a_late_kill_left(built):
    before = files_of(built)
    (partial_dir(built) / "chunks").mkdir(parents=True)
    (partial_dir(built) / "build.json").write_text("{}")
    index = Index.build(TEXTS, IDS, [f"عنوان {i}" for i in range(len(TEXTS))], built, resume=True)
    assert index.search("البتراء", 1)[0].document == "doc-6"
    assert files_of(built) == before and not partial_dir(built).exists()


def test_a_build_killed_before_its_manifest_starts_again(tmp_path):
    (partial_dir(tmp_path / "index") / "chunks").mkdir(parents=True)
    assert len(Index.build(TEXTS, path=tmp_path / "index")) == 8
    assert not partial_dir(tmp_path / "index").exists()


def test_threads_may_search_one_opened_index_at_once(built):
    from concurrent.futures import ThreadPoolExecutor

    index = Index.open(built)
    queries = ["مدينة دمشق", "نهر النيل في القاهرة", "الزيتون", "البحر في بيروت"] * 25
    alone = [index.search(q, 3) for q in queries]
    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(lambda q: index.search(q, 3), queries)) == alone
