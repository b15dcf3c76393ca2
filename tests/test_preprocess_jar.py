"""The Farasa jar backend's protocol, with a small Python script standing in for `java -jar FarasaSegmenterJar.jar`."""
from __future__ import annotations

import sys

import pytest

from arabert_pipeline import Preprocessor
from arabert_pipeline.errors import BackendError
from arabert_pipeline.preprocess import segment
from arabert_pipeline.preprocess.segment import FarasaJarSegmenter, FarasaPySegmenter, default_segmenter

# Like the jar in interactive mode: one line in, one segmented line out, flushed. Splits a leading و or ال, answers
# an empty line for the word "فارغ", exits on "اخرج", and prints its line count to stderr when stdin closes.
FAKE_JAR = r"""
import sys
count = 0
for line in sys.stdin:
    word = line.strip()
    count += 1
    if word == "اخرج":
        print("fake jar: asked to exit", file=sys.stderr)
        sys.exit(3)
    if word == "فارغ":
        out = ""
    elif word.startswith("وال") and len(word) > 3:
        out = "و+ال+" + word[3:]
    elif word.startswith("و") and len(word) > 1:
        out = "و+" + word[1:]
    else:
        out = word
    sys.stdout.write(out + "\n")
    sys.stdout.flush()
print(f"fake jar: {count} lines", file=sys.stderr)
"""


@pytest.fixture
def fake_command(tmp_path):
    script = tmp_path / "fake_farasa_jar.py"
    script.write_text(FAKE_JAR, encoding="utf-8")
    return [sys.executable, str(script)]


def test_one_process_many_batches(fake_command):
    seg = FarasaJarSegmenter(command=fake_command)
    assert seg.segment_words(["والكتاب", "وقلم", "بيت"]) == [["و+ال+كتاب"], ["و+قلم"], ["بيت"]]
    process = seg._process
    assert seg.segment_words(["ودفتر", "والكتاب"]) == [["و+دفتر"], ["و+ال+كتاب"]]
    assert seg._process is process  # no new process per call
    seg.close()
    assert process.returncode == 0


def test_large_batch_does_not_deadlock(fake_command):
    words = [f"و{chr(0x628 + i % 20)}{i}" for i in range(30000)]  # far more than a pipe buffer holds
    seg = FarasaJarSegmenter(command=fake_command)
    out = seg.segment_words(words)
    assert out[12345] == ["و+" + words[12345][1:]]
    seg.close()


def test_marking_through_the_preprocessor(fake_command):
    p = Preprocessor("arabertv2", segmenter=FarasaJarSegmenter(command=fake_command))
    assert p.preprocess("والكتاب وقلم http://a.com") == "و+ ال+ كتاب و+ قلم [رابط]"
    assert p.unpreprocess("و+ ال+ كتاب و+ قلم") == "والكتاب وقلم"


def test_empty_answer_is_an_error(fake_command):
    seg = FarasaJarSegmenter(command=fake_command)
    with pytest.raises(BackendError, match="empty line for the word 'فارغ'"):
        seg.segment_words(["كتاب", "فارغ", "وقلم"])
    # the answers still pending from the failed batch are not taken for the next words
    assert seg.segment_words(["ودفتر"]) == [["و+دفتر"]]
    seg.close()


def test_dead_process_is_an_error_with_its_stderr(fake_command):
    seg = FarasaJarSegmenter(command=fake_command)
    with pytest.raises(BackendError, match="stopped before segmenting.*exit code 3.*asked to exit"):
        seg.segment_words(["اخرج", "كتاب"])
    # the next call starts a fresh process
    assert seg.segment_words(["وقلم"]) == [["و+قلم"]]
    seg.close()


def test_command_that_cannot_start():
    seg = FarasaJarSegmenter(command=["/nonexistent/java", "-jar", "x.jar"])
    with pytest.raises(BackendError, match="cannot start the Farasa jar"):
        seg.segment_words(["كتاب"])


def test_missing_jar_or_java(tmp_path, monkeypatch):
    with pytest.raises(BackendError, match="Farasa jar not found"):
        FarasaJarSegmenter(tmp_path / "FarasaSegmenterJar.jar")
    jar = tmp_path / "FarasaSegmenterJar.jar"
    jar.write_bytes(b"PK")
    monkeypatch.setattr(segment.shutil, "which", lambda name: None)
    with pytest.raises(BackendError, match="needs Java"):
        FarasaJarSegmenter(jar)


def test_backend_choice(tmp_path, monkeypatch):
    monkeypatch.delenv(segment.JAR_ENV, raising=False)
    assert isinstance(default_segmenter(), FarasaPySegmenter)
    jar = tmp_path / "FarasaSegmenterJar.jar"
    jar.write_bytes(b"PK")
    monkeypatch.setattr(segment.shutil, "which", lambda name: "/usr/bin/java")
    monkeypatch.setenv(segment.JAR_ENV, str(jar))
    chosen = default_segmenter()
    assert isinstance(chosen, FarasaJarSegmenter)
    assert chosen.command == ["/usr/bin/java", "-Dfile.encoding=UTF-8", "-jar", str(jar)]
    assert chosen.name == f"farasa-jar:{jar.resolve()}"
    assert Preprocessor("arabertv2").segmenter.name == chosen.name
    monkeypatch.setenv(segment.JAR_ENV, str(tmp_path / "missing.jar"))
    with pytest.raises(BackendError, match="not found"):
        Preprocessor("arabertv2")
    assert Preprocessor("arabertv02").segmenter is None  # no segmentation, no jar needed
