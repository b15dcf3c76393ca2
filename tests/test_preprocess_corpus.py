"""Corpus preprocessing: line-for-line output, order with workers, compressed files, resume, bad input, CLI."""
from __future__ import annotations

import gzip
import hashlib
import json
import lzma
import random

import pytest

from arabert_pipeline.cli import main
from arabert_pipeline.errors import ConfigError, InputError
from arabert_pipeline.preprocess import Preprocessor, corpus, segmenter_backend, wordcache
from arabert_pipeline.preprocess.corpus import preprocess_corpus

# Written for these tests: news-like sentences with diacritics, clitics, punctuation, digits, Latin, a URL, emoji.
SENTENCES = [
    "وَقَالَ الوزيرُ إنّ الحكومة ستعمل على تطوير التعليم في المدارس الحكومية.",
    "وسيكتبونها غداً في التقرير السنوي للشركة، بحسب المتحدث الرسمي.",
    "ارتفعت أسعار النفط بنسبة 3.5% خلال الأسبوع الماضي في الأسواق العالمية",
    "قال المدرب: «سنلعب من أجل الفوز» قبل المباراة النهائية بالكأس.",
    "وللمرة الأولى منذ عام ٢٠١٥ يتجاوز عدد الزوار مليون زائر 🎉",
    "تابعوا التفاصيل على الموقع https://example.com/news?id=12 أو راسلونا info@example.org",
    "وبالإضافة إلى ذلك، أعلنت الوزارة عن برنامج جديد لدعم الشباب والمبادرات الصغيرة",
    "فكتبوها بأيديهم وعلّقوها على جدران المكتبة",
    "استقبل الرئيس وفداً من رجال الأعمال لبحث سبل التعاون الاقتصادي",
    "ذكرت وكالة الأنباء أن الاجتماع سيعقد يوم الأحد المقبل في العاصمة",
    "لاعبو المنتخب يتدربون يومياً استعداداً للبطولة القارية",
    "The meeting was held in English أيضاً مع ترجمة فورية للحضور",
    "هههههه هذا رائع جداً!!!!",
    "بلغت قيمة الصادرات 120 مليار ريال في 2014م مقارنة بـ 98 ملياراً في العام السابق",
    "وأكدت الهيئة أن الطقس سيكون معتدلاً على معظم المناطق",
    "كتبهم ودفاترهم موجودة في الصف الثالث",
]


LETTERS = "ابتثجحخدذرزسشصضطظعغفقكلمنهوي"


def make_lines(count: int, seed: int = 0) -> list[str]:
    """`count` lines: documents of 1-6 paragraphs separated by blank lines, as in the shared corpus.

    Each paragraph also gets a made-up word, so that new words keep coming as in real text (the word cache and its
    statistics then differ between the beginning and the end of the file).
    """
    rng = random.Random(seed)
    lines: list[str] = []
    while len(lines) < count:
        for _ in range(rng.randint(1, 6)):
            made_up = "".join(rng.choices(LETTERS, k=6))
            lines.append(" ".join(rng.sample(SENTENCES, rng.randint(1, 3)) + [made_up]))
        lines.append("")
    return lines[:count]


def write_text(path, lines: list[str]) -> None:
    data = ("\n".join(lines) + "\n").encode("utf-8")
    opener = {".gz": gzip.open, ".xz": lzma.open}.get(path.suffix, open)
    with opener(path, "wb") as f:
        f.write(data)


def read_text(path) -> str:
    opener = {".gz": gzip.open, ".xz": lzma.open}.get(path.suffix, open)
    with opener(path, "rb") as f:
        return f.read().decode("utf-8")


def expected_text(lines: list[str], name: str) -> str:
    preprocessor = Preprocessor(name)
    return "".join(preprocessor.preprocess(line) + "\n" for line in lines)


@pytest.fixture(scope="module")
def lines() -> list[str]:
    return make_lines(300)


@pytest.fixture(scope="module")
def expected_v2(lines) -> str:
    return expected_text(lines, "arabertv2")


def leftovers(output) -> list[str]:
    return sorted(p.name for p in output.parent.iterdir() if p.name.startswith(output.name))


@pytest.mark.parametrize("name", ["arabertv02", "none"])
def test_one_output_line_per_input_line(tmp_path, lines, name):
    source = tmp_path / "in.txt"
    write_text(source, lines)
    output = tmp_path / "out.txt"
    report = preprocess_corpus([source], output, preprocessing=name, progress=False)

    text = read_text(output)
    assert text == expected_text(lines, name)
    out_lines = text.split("\n")[:-1]
    assert len(out_lines) == len(lines) == report.lines
    assert [i for i, line in enumerate(out_lines) if not line] == [i for i, line in enumerate(lines) if not line]
    sidecar = json.loads((tmp_path / "out.txt.arabert_pipeline.json").read_text(encoding="utf-8"))
    assert sidecar["preprocessing"] == name
    assert sidecar["lines"] == len(lines)
    assert sidecar["words"] == sum(len(line.split()) for line in lines)
    assert sidecar["inputs"] == [
        {"path": str(source), "lines": len(lines), "bytes": source.stat().st_size, "replacements": 0,
         "size": source.stat().st_size, "mtime_ns": source.stat().st_mtime_ns,
         "sha256": hashlib.sha256(source.read_bytes()).hexdigest()}
    ]
    assert leftovers(output) == ["out.txt", "out.txt.arabert_pipeline.json"]


def test_project_edge_cases_line_for_line(tmp_path, samples):
    source = samples / "edge_cases.txt"
    lines = source.read_text(encoding="utf-8").split("\n")[:-1]
    output = tmp_path / "edge.txt"
    report = preprocess_corpus([source], output, preprocessing="arabertv2", chunk_lines=50, progress=False)

    expected = expected_text(lines, "arabertv2")
    assert read_text(output) == expected
    assert report.lines == len(lines)
    emptied = [a for a, b in zip(lines, expected.split("\n")[:-1], strict=True) if a.strip() and not b]
    assert report.emptied_lines == len(emptied) > 0


@pytest.mark.slow
def test_two_workers_keep_input_order(tmp_path, lines, expected_v2):
    source = tmp_path / "in.txt"
    write_text(source, lines)
    output = tmp_path / "out.txt"
    report = preprocess_corpus([source], output, preprocessing="arabertv2", workers=2, chunk_lines=7, progress=False)

    assert read_text(output) == expected_v2
    assert report.lines == len(lines)
    # Words segmented by both workers are stored once: the count is exactly the corpus's distinct words.
    single = Preprocessor("arabertv2")
    single.preprocess_batch(lines)
    assert report.segmented_words == len(single.segmenter.drain_new()) > 300
    assert report.cache_lookups - report.cache_hits >= report.segmented_words
    assert 0.3 < report.cache_hit_rate < 1


def test_compressed_inputs_concatenated_in_order_and_compressed_output(tmp_path, lines):
    parts = [lines[:100], lines[100:180], lines[180:]]
    sources = [tmp_path / "a.txt.xz", tmp_path / "b.txt", tmp_path / "c.txt.gz"]
    for source, part in zip(sources, parts, strict=True):
        write_text(source, part)
    for suffix in (".gz", ".xz"):
        output = tmp_path / f"out.txt{suffix}"
        report = preprocess_corpus(sources, output, preprocessing="arabertv02", chunk_lines=32, checkpoint_chunks=2,
                                   progress=False)
        assert read_text(output) == expected_text(lines, "arabertv02")
        assert report.lines == len(lines)
        sidecar = json.loads(output.with_name(output.name + ".arabert_pipeline.json").read_text(encoding="utf-8"))
        assert [f["lines"] for f in sidecar["inputs"]] == [len(p) for p in parts]
        # The digest is of the file on disk, compressed bytes and all: the same file gives the same digest.
        assert [f["sha256"] for f in sidecar["inputs"]] == [hashlib.sha256(p.read_bytes()).hexdigest()
                                                            for p in sources]


class Interrupted(Exception):
    pass


def interrupt_after(monkeypatch, chunks: int) -> None:
    """Make the run fail while writing chunk `chunks + 1`, as a crash or Ctrl-C would."""
    write = corpus._PartWriter.write
    calls = []

    def failing_write(self, lines):
        calls.append(1)
        if len(calls) > chunks:
            raise Interrupted
        write(self, lines)

    monkeypatch.setattr(corpus._PartWriter, "write", failing_write)


@pytest.mark.parametrize("suffix,workers", [(".txt", 1), (".txt", 2), (".txt.gz", 1)])
@pytest.mark.slow
def test_resume_gives_the_same_bytes_as_an_uninterrupted_run(tmp_path, monkeypatch, lines, suffix, workers):
    source = tmp_path / "in.txt.xz"
    write_text(source, lines)
    options = dict(preprocessing="arabertv2", workers=workers, chunk_lines=20, checkpoint_chunks=3, progress=False)
    reference = tmp_path / "reference" / f"out{suffix}"
    uninterrupted = preprocess_corpus([source], reference, **options)

    output = tmp_path / "run" / f"out{suffix}"
    with monkeypatch.context() as patch:
        interrupt_after(patch, 7)  # two checkpoints (6 chunks) plus one chunk written after the last
        with pytest.raises(Interrupted):
            preprocess_corpus([source], output, **options)
    part = output.with_name(output.name + ".part")
    checkpoint = json.loads(output.with_name(output.name + ".part.json").read_text(encoding="utf-8"))
    assert checkpoint["lines"] == 6 * 20
    assert not output.exists() and not output.with_name(output.name + ".arabert_pipeline.json").exists()
    with open(part, "ab") as f:  # a killed process may leave anything after the checkpoint, even half a character
        f.write("نصف سطر".encode()[:5] * (reference.stat().st_size // 5 + 1))
    with open(output.with_name(output.name + ".words.tsv"), "ab") as f:
        f.write("كلمة\tكل".encode())  # a torn cache line

    with pytest.raises(ConfigError, match="--resume"):
        preprocess_corpus([source], output, **options)
    report = preprocess_corpus([source], output, resume=True, **options)

    assert output.read_bytes() == reference.read_bytes()
    assert report.lines == len(lines)
    assert report.resumed_at_line == 6 * 20
    assert report.segmented_words == uninterrupted.segmented_words
    assert report.cache_lookups == uninterrupted.cache_lookups
    assert leftovers(output) == [f"out{suffix}", f"out{suffix}.arabert_pipeline.json", f"out{suffix}.words.tsv"]
    sidecar = json.loads(output.with_name(output.name + ".arabert_pipeline.json").read_text(encoding="utf-8"))
    assert sidecar["lines"] == len(lines)
    assert sidecar["words"] == sum(len(line.split()) for line in lines)
    assert sidecar["inputs"][0]["sha256"] == hashlib.sha256(source.read_bytes()).hexdigest()  # all of it, resumed


def test_resume_refuses_changed_inputs(tmp_path, monkeypatch, lines):
    source = tmp_path / "in.txt"
    write_text(source, lines)
    output = tmp_path / "out.txt"
    options = dict(preprocessing="arabertv02", chunk_lines=10, checkpoint_chunks=1, progress=False)
    with monkeypatch.context() as patch:
        interrupt_after(patch, 3)
        with pytest.raises(Interrupted):
            preprocess_corpus([source], output, **options)
    write_text(source, lines[:-1])
    with pytest.raises(ConfigError, match="other inputs"):
        preprocess_corpus([source], output, resume=True, **options)


def test_word_cache_is_reused_by_later_runs(tmp_path, lines, expected_v2):
    source = tmp_path / "in.txt"
    write_text(source, lines)
    cache = tmp_path / "words.tsv"
    first = preprocess_corpus([source], tmp_path / "a.txt", preprocessing="arabertv2", word_cache=cache, progress=False)
    second = preprocess_corpus([source], tmp_path / "b.txt", preprocessing="arabertv2", word_cache=cache,
                               progress=False)

    assert first.segmented_words > 0
    assert second.segmented_words == 0
    assert second.cache_hits == second.cache_lookups == first.cache_lookups
    assert read_text(tmp_path / "b.txt") == expected_v2
    assert len(cache.read_text(encoding="utf-8").splitlines()) == 1 + first.segmented_words


def test_word_cache_shared_by_concurrent_runs(tmp_path):
    path = tmp_path / "words.tsv"
    backend = segmenter_backend("arabertv2")
    first, second = wordcache.WordCache(path, backend), wordcache.WordCache(path, backend)
    worker = corpus._Worker("arabertv2", None, str(path))
    first.add({"وكتب": "و+كتب"})
    second.add({"بالقلم": "ب+ال+قلم"})  # appended after the first run's line, not over it
    worker._read_word_cache()
    assert {"وكتب": "و+كتب", "بالقلم": "ب+ال+قلم"}.items() <= worker.segmenter.cache_items().items()

    first.close()
    # A resumed run cuts back.
    wordcache.WordCache(path, backend, keep_bytes=len(wordcache.cache_header(backend))).close()
    second.add({"فسيكفيكهم": "ف+س+يكفي+ك+هم", "للكتاب": "ل+ال+كتاب"})
    worker._read_word_cache()  # its offset now points into the middle of a line: it must read from the start
    assert {"فسيكفيكهم": "ف+س+يكفي+ك+هم", "للكتاب": "ل+ال+كتاب"}.items() <= worker.segmenter.cache_items().items()
    second.close()
    assert wordcache.WordCache(path, backend).words == {"فسيكفيكهم", "للكتاب"}

    path.write_text("a list of words\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="not a word cache"):
        wordcache.WordCache(path, backend)


def test_invalid_utf8_names_file_and_line(tmp_path, lines):
    source = tmp_path / "bad.txt"
    data = [line.encode("utf-8") for line in lines[:50]]
    data[36] = "سطر فيه بايت خاطئ ".encode() + b"\xff" + " بعده".encode()
    source.write_bytes(b"\n".join(data) + b"\n")
    output = tmp_path / "out.txt"

    with pytest.raises(InputError, match=r"bad\.txt: line 37: invalid UTF-8") as error:
        preprocess_corpus([source], output, preprocessing="none", chunk_lines=8, progress=False)
    assert error.value.line == 37
    assert not output.exists() and not (tmp_path / "out.txt.arabert_pipeline.json").exists()

    report = preprocess_corpus([source], output, preprocessing="none", errors="replace", resume=True, progress=False)
    assert report.replacements == 1
    out_lines = read_text(output).split("\n")
    assert len(out_lines) == 51 and out_lines[36] == data[36].decode("utf-8", "replace")
    sidecar = json.loads((tmp_path / "out.txt.arabert_pipeline.json").read_text(encoding="utf-8"))
    assert sidecar["replacements"] == 1 and sidecar["errors"] == "replace"


def test_unreadable_inputs_fail_before_any_work(tmp_path, lines):
    good = tmp_path / "good.txt"
    write_text(good, lines)
    empty = tmp_path / "empty.txt.gz"
    write_text(empty, ["", "  "])
    corrupt = tmp_path / "corrupt.txt.xz"
    corrupt.write_bytes(b"not xz at all\n")
    output = tmp_path / "out.txt"

    with pytest.raises(InputError, match=r"missing\.txt: no such file"):
        preprocess_corpus([good, tmp_path / "missing.txt"], output, preprocessing="none", progress=False)
    with pytest.raises(InputError, match=r"empty\.txt\.gz: contains no text"):
        preprocess_corpus([good, empty], output, preprocessing="none", progress=False)
    with pytest.raises(InputError, match=r"corrupt\.txt\.xz: cannot read"):
        preprocess_corpus([good, corrupt], output, preprocessing="none", progress=False)
    with pytest.raises(ConfigError, match="unknown preprocessing"):
        preprocess_corpus([good], output, preprocessing="arabertv9", progress=False)
    with pytest.raises(ConfigError, match="is the input .*good.txt: writing it would destroy the input"):
        preprocess_corpus([good], good, preprocessing="none", progress=False)
    assert leftovers(output) == []


def test_cli_exit_codes(tmp_path, lines, capsys):
    source = tmp_path / "in.txt.gz"
    write_text(source, lines)
    output = tmp_path / "out.txt"

    assert main(["preprocess", str(source), "-o", str(output), "--preprocessing", "arabertv02", "--no-progress"]) == 0
    assert read_text(output) == expected_text(lines, "arabertv02")
    assert f"{len(lines):,} lines" in capsys.readouterr().out

    assert main(["preprocess", str(tmp_path / "nope.txt"), "-o", str(output), "--preprocessing", "none"]) == 2
    assert "nope.txt: no such file" in capsys.readouterr().err

    bad = tmp_path / "bad.txt"
    bad.write_bytes("سطر أول\n".encode() + b"\xc3\x28\n")
    assert main(["preprocess", str(bad), "-o", str(tmp_path / "bad.out"), "--preprocessing", "none"]) == 2
    assert "bad.txt: line 2: invalid UTF-8" in capsys.readouterr().err
    assert main(["preprocess", str(bad), "-o", str(tmp_path / "bad.out"), "--preprocessing", "none"]) == 2
    assert "--resume" in capsys.readouterr().err
    assert main(["preprocess", str(bad), "-o", str(tmp_path / "bad.out"), "--preprocessing", "none", "--resume",
                 "--errors", "replace", "--no-progress"]) == 0
    assert (tmp_path / "bad.out").read_text(encoding="utf-8") == "سطر أول\n\ufffd(\n"
