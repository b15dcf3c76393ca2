"""train-embeddings / neighbours (word2vec, fastText on a few hundred lines) and the polysemy measurement (on a tiny
random BERT), at tiny size: one worker, one OpenMP thread."""
from __future__ import annotations

import gzip
import json
import os

import numpy as np
import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")

from arabert_pipeline.artifacts.metadata import read_metadata
from arabert_pipeline.cli import main
from arabert_pipeline.embeddings import Embeddings
from arabert_pipeline.embeddings.polysemy import (
    STATIC_INPUT,
    Occurrence,
    encoder_vectors,
    measure,
    read_homographs,
    run_polysemy,
    sense_separation,
    word_span,
)
from arabert_pipeline.embeddings.train import MAX_SENTENCE_WORDS, CorpusSentences, train_embeddings
from arabert_pipeline.errors import ConfigError, InputError
from arabert_pipeline.outputs import OutputLock
from conftest import SAMPLES, build_tiny_bert
from test_preprocess_corpus import make_lines, write_text

pytest.importorskip("gensim")
TINY = ["--dim", "16", "--min-count", "2", "--epochs", "2", "--workers", "1", "--no-progress"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A 400-line corpus written by `preprocess` (arabertv02), so with its sidecar."""
    directory = tmp_path_factory.mktemp("corpus")
    write_text(directory / "raw.txt.xz", make_lines(400))
    assert main(["preprocess", str(directory / "raw.txt.xz"), "-o", str(directory / "train.txt.gz"),
                 "--preprocessing", "arabertv02", "--workers", "1", "--no-progress"]) == 0
    return directory / "train.txt.gz"


@pytest.fixture(scope="module")
def fasttext_dir(corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("ft") / "ft"
    train_embeddings([corpus], out, model="fasttext", dim=16, min_count=2, epochs=2, workers=1, bucket=5000,
                     progress=False)
    return out


def corpus_words(corpus) -> list[str]:
    with gzip.open(corpus, "rt", encoding="utf-8") as f:
        return f.read().split()


def test_word2vec_cli_writes_the_formats_and_records_the_preprocessing(corpus, tmp_path, capsys):
    from gensim.models import KeyedVectors

    out = tmp_path / "w2v"
    assert main(["train-embeddings", str(corpus), "-o", str(out), "--cbow", *TINY]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["arabert_pipeline.json", "vectors.kv", "vectors.npy",
                                                     "vectors.txt", "words.txt"]
    meta = read_metadata(out)
    assert (meta["preprocessing"], meta["model"], meta["architecture"], meta["dim"]) == \
        ("arabertv02", "word2vec", "cbow", 16)
    embeddings = Embeddings.load(out)
    text = KeyedVectors.load_word2vec_format(str(out / "vectors.txt"), binary=False)
    assert embeddings.words == text.index_to_key
    np.testing.assert_allclose(embeddings.vectors, text.vectors, atol=1e-5)
    counts = {}
    for word in corpus_words(corpus):
        counts[word] = counts.get(word, 0) + 1
    assert set(embeddings.words) == {w for w, n in counts.items() if n >= 2}
    assert meta["corpus_words"] == sum(counts.values())

    query = embeddings.words[0]
    found = embeddings.neighbours(query, k=5)
    assert len(found) == 5 and query not in [w for w, _ in found]
    scores = [s for _, s in found]
    assert scores == sorted(scores, reverse=True)
    unit = embeddings.vectors / np.linalg.norm(embeddings.vectors, axis=1, keepdims=True)
    brute = unit @ unit[0]
    brute[0] = -np.inf
    assert [w for w, _ in found] == [embeddings.words[i] for i in np.argsort(-brute, kind="stable")[:5]]

    capsys.readouterr()
    assert main(["neighbours", str(out), query, "-k", "3"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert [line.split("\t")[1] for line in printed] == [w for w, _ in found[:3]]


def test_queries_are_preprocessed_like_the_corpus(corpus, tmp_path):
    out = tmp_path / "w2v"
    train_embeddings([corpus], out, dim=16, min_count=2, epochs=1, workers=1, progress=False)
    embeddings = Embeddings.load(out)
    word = next(w for w in embeddings.words if len(w) > 3 and w.isalpha())
    decorated = word[0] + "\u064e" + word[1:] + "\u0640"  # a fatha and a tatweel: arabertv02 strips both
    assert embeddings.neighbours(decorated, k=4) == embeddings.neighbours(word, k=4)
    with pytest.raises(InputError, match="not in the vocabulary"):
        embeddings.neighbours("كلمةلمترد", k=3)


def test_training_is_reproducible_with_one_worker(corpus, tmp_path):
    for name in ("a", "b"):
        train_embeddings([corpus], tmp_path / name, dim=8, min_count=2, epochs=1, workers=1, seed=3,
                         progress=False)
    assert np.array_equal(np.load(tmp_path / "a" / "vectors.npy"), np.load(tmp_path / "b" / "vectors.npy"))


def test_fasttext_gives_unseen_forms_the_vector_gensim_gives(fasttext_dir):
    from gensim.models import KeyedVectors

    embeddings = Embeddings.load(fasttext_dir)
    gensim_kv = KeyedVectors.load(str(fasttext_dir / "vectors.kv"))  # our own file, written by this test's fixture
    unseen = "والمكتباتيون"
    assert unseen not in embeddings
    np.testing.assert_allclose(embeddings.vector(unseen), gensim_kv[unseen], rtol=1e-5, atol=1e-6)
    seen = embeddings.words[3]
    np.testing.assert_allclose(embeddings.vector(seen), gensim_kv[seen], atol=1e-6)
    assert len(embeddings.neighbours(unseen, k=3)) == 3
    assert read_metadata(fasttext_dir)["bucket"] == 5000


def test_loading_never_unpickles(fasttext_dir, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(fasttext_dir, copy)
    np.save(copy / "vectors.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(ConfigError, match="not a numeric .npy"):
        Embeddings.load(copy)
    np.save(copy / "vectors.npy", np.zeros((2, 16), dtype=np.float32))
    with pytest.raises(ConfigError, match="expected"):
        Embeddings.load(copy)


def test_outputs_are_claimed_locked_and_replaced_only_with_overwrite(corpus, tmp_path, capsys):
    out = tmp_path / "w2v"
    args = ["train-embeddings", str(corpus), "-o", str(out), *TINY]
    assert main(args) == 0
    assert main(args) == 2
    assert "--overwrite" in capsys.readouterr().err
    before = (out / "vectors.npy").stat().st_ino
    assert main(args + ["--overwrite", "--epochs", "1"]) == 0
    assert (out / "vectors.npy").stat().st_ino != before and read_metadata(out)["epochs"] == 1
    with OutputLock(out, "train-embeddings"):
        assert main(args + ["--overwrite"]) == 2
    assert "in use by PID" in capsys.readouterr().err
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("x")
    assert main(["train-embeddings", str(corpus), "-o", str(foreign), *TINY, "--overwrite"]) == 2
    assert (foreign / "notes.txt").read_text() == "x"
    assert main(["train-embeddings", str(corpus), "-o", str(corpus.parent), *TINY]) == 2  # holds the input


def test_inputs_need_a_sidecar_and_unreadable_ones_are_errors(tmp_path, capsys):
    raw = tmp_path / "raw.txt"
    write_text(raw, make_lines(50))
    assert main(["train-embeddings", str(raw), "-o", str(tmp_path / "out"), *TINY]) == 2
    assert "arabert-pipeline preprocess" in capsys.readouterr().err
    assert main(["train-embeddings", str(raw), "-o", str(tmp_path / "out"), *TINY,
                 "--preprocessing", "arabertv02"]) == 0
    broken = tmp_path / "broken.txt.gz"
    whole = gzip.compress("\n".join(make_lines(200)).encode())
    broken.write_bytes(whole[:len(whole) // 2])
    (tmp_path / "broken.txt.gz.arabert_pipeline.json").write_text(json.dumps({"preprocessing": "arabertv02"}))
    with pytest.raises(InputError, match="broken.txt.gz: cannot read"):
        train_embeddings([broken], tmp_path / "out2", dim=8, min_count=1, epochs=1, workers=1, progress=False)
    assert not (tmp_path / "out2").exists()


def test_corpus_stream_restarts_and_cuts_long_lines(tmp_path):
    path = tmp_path / "c.txt.xz"
    write_text(path, ["a b c", "", "w " * (MAX_SENTENCE_WORDS + 5)])
    sentences = CorpusSentences([path])
    first = list(sentences)
    assert first == list(sentences)  # a second pass reads the file again
    assert [len(s) for s in first] == [3, MAX_SENTENCE_WORDS, 5] and sentences.lines == 2


# Issue 37: the files of an embeddings directory, full disks, a vocabulary of one word ----------------------------

def _vectors_dir(directory, words: list[str], dim: int = 4):
    directory.mkdir()
    vectors = np.random.default_rng(0).normal(size=(len(words), dim)).astype(np.float32)
    np.save(directory / "vectors.npy", vectors, allow_pickle=False)
    (directory / "words.txt").write_text("".join(f"{w}\t5\n" for w in words), encoding="utf-8")
    (directory / "arabert_pipeline.json").write_text(json.dumps(
        {"task": "word-embeddings", "preprocessing": "arabertv02", "dim": dim, "model": "word2vec"}))
    return directory


def _absurd_header(path):
    """A vectors.npy whose header declares 10^12 rows of 4 floats, followed by a few bytes."""
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(f, {"descr": "<f4", "fortran_order": False, "shape": (10**12, 4)})
        f.write(b"\0" * 64)


def _many_lines(path):
    """3 million lines (30 MB) where 5 are expected: read whole and split, they took 300 MB."""
    with open(path, "w", encoding="utf-8") as f:
        for block in range(300):
            f.write("".join(f"w{block}x{i}\t5\n" for i in range(10_000)))


LOAD_IN_CHILD = """
import resource
import numpy
import arabert_pipeline.preprocess
from arabert_pipeline.embeddings import Embeddings
from arabert_pipeline.errors import ArabertPipelineError
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    Embeddings.load({path!r})
except ArabertPipelineError as exc:
    print("REFUSED", exc)
else:
    print("LOADED")
print("GREW_KB", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
"""


@pytest.mark.parametrize("name, make, expected", [  # a child process each: the quick loop keeps two
    ("words.txt", os.mkfifo, "words.txt: not a regular file (it is a FIFO)"),
    pytest.param("words.txt", lambda p: p.symlink_to("/dev/zero"),
                 "words.txt: not a regular file (it is a character device)", marks=pytest.mark.slow),
    pytest.param("vectors.npy", os.mkfifo, "vectors.npy: not a regular file (it is a FIFO)", marks=pytest.mark.slow),
    pytest.param("vectors.npy", lambda p: p.symlink_to("/dev/zero"),
                 "vectors.npy: not a regular file (it is a character device)", marks=pytest.mark.slow),
    ("vectors.npy", _absurd_header, "declares (1000000000000, 4) float32 but holds 64 bytes of data"),
    pytest.param("words.txt", _many_lines, "words.txt: more lines than the 5 rows of", marks=pytest.mark.slow),
])
def test_files_of_an_embeddings_directory_are_checked_before_they_are_read(tmp_path, name, make, expected):
    from test_hostile_round3 import in_child

    if not os.path.exists("/dev/zero"):
        pytest.skip("no /dev/zero on this platform")
    directory = _vectors_dir(tmp_path / "emb", ["كتاب", "قلم", "بيت", "باب", "نهر"])
    (directory / name).unlink()
    make(directory / name)
    code, out = in_child(LOAD_IN_CHILD.format(path=str(directory)))
    assert code == 0 and out.startswith("REFUSED") and expected in out, out
    grew = int(out.rsplit("GREW_KB", 1)[1])
    assert grew < 50_000, f"{grew} kB more to refuse it"


def test_neighbours_of_the_only_word_says_there_are_none(tmp_path, capsys):
    directory = _vectors_dir(tmp_path / "one", ["كتاب"])
    assert Embeddings.load(directory).neighbours("كتاب") == []
    assert main(["neighbours", str(directory), "كتاب"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "no other word" in captured.err and captured.err.count("\n") == 1


@pytest.mark.parametrize("write, name", [("numpy.lib.format.write_array", "vectors.npy"),
                                         ("gensim.utils.pickle", "vectors.kv")])
def test_train_embeddings_on_a_full_disk_names_the_file(corpus, tmp_path, monkeypatch, capsys, write, name):
    import errno
    import importlib

    module, _, attribute = write.rpartition(".")

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(importlib.import_module(module), attribute, full)
    out = tmp_path / "w2v"
    assert main(["train-embeddings", str(corpus), "-o", str(out), *TINY]) == 2
    err = capsys.readouterr().err
    assert f"error: {out / name}: No space left on device" in err and err.count("\n") == 1, err
    assert not out.exists()


@pytest.mark.slow
def test_train_embeddings_past_a_file_size_limit_names_the_file(corpus, tmp_path):
    from test_hostile_outputs import one_line_error, run_cli

    out = tmp_path / "w2v"
    code, err = run_cli(["train-embeddings", corpus, "-o", out, *TINY], file_size_limit=2000)
    assert code == 2, err
    one_line_error(err, f"{out / 'vectors.npy'}: File too large")


def test_numpy_s_short_write_on_a_full_disk_names_the_file_and_the_reason(tmp_path, monkeypatch):
    """np.save to a file name reports a failed write as "N requested and M written", without errno or file name (gensim
    saves vectors.kv's large arrays that way)."""
    import errno

    from arabert_pipeline.artifacts.writes import naming_io_errors

    full = os.statvfs_result((4096, 4096, 1000, 0, 0, 1000, 10, 10, 0, 255))
    monkeypatch.setattr(os, "statvfs", lambda path: full)
    with pytest.raises(OSError) as caught, naming_io_errors(tmp_path / "vectors.kv"):  # noqa: PT011  errno checked below
        raise OSError("398740 requested and 24968 written")
    assert (caught.value.errno, caught.value.filename) == (errno.ENOSPC, str(tmp_path / "vectors.kv"))
    room = os.statvfs_result((4096, 4096, 1000, 900, 900, 1000, 10, 10, 0, 255))
    monkeypatch.setattr(os, "statvfs", lambda path: room)
    with pytest.raises(OSError) as caught, naming_io_errors(tmp_path / "vectors.kv"):  # noqa: PT011  checked below
        raise OSError("398740 requested and 24968 written")  # room left, no file-size limit: the words numpy had
    assert caught.value.filename == str(tmp_path / "vectors.kv") and "398740 requested" in caught.value.strerror


# Polysemy --------------------------------------------------------------------------------------------------------


def test_sense_separation_on_constructed_vectors():
    rng = np.random.default_rng(0)
    separable = np.vstack([rng.normal([5, 0, 0], 0.3, (6, 3)), rng.normal([0, 5, 0], 0.3, (6, 3))])
    senses = ["a"] * 6 + ["b"] * 6
    result = sense_separation(separable, senses)
    assert result["accuracy"] == 1.0 and result["same_sense_cosine"] > 0.9 > 0.2 > result["cross_sense_cosine"]
    static = np.tile([1.0, 2.0, 3.0], (12, 1))  # one point for every sentence
    assert sense_separation(static, senses)["accuracy"] == pytest.approx(0.5)
    assert sense_separation(static[:9], ["a", "b", "c"] * 3)["accuracy"] == pytest.approx(1 / 3)
    # Unbalanced senses and values whose centroids round differently: still a tie, still exactly chance.
    uneven = np.tile([0.1, 0.7, 1 / 3], (7, 1))
    assert sense_separation(uneven, ["a"] * 5 + ["b"] * 2)["accuracy"] == pytest.approx(0.5)
    assert sense_separation(static, senses)["cross_sense_cosine"] == pytest.approx(1.0)
    swapped = separable[[6, 1, 2, 3, 4, 5, 0, 7, 8, 9, 10, 11]]  # two sentences in the other sense's cloud
    assert sense_separation(swapped, senses)["accuracy"] == pytest.approx(10 / 12)
    with pytest.raises(ConfigError):
        sense_separation(separable[:7], senses[:7])  # sense b has one sentence: nothing to leave it out of


def test_word_span_needs_exactly_one_whole_word():
    assert word_span("شربنا من عين باردة", "عين") == (9, 12)
    with pytest.raises(InputError, match="0 times"):
        word_span("رأت عينان", "عين")
    with pytest.raises(InputError, match="2 times"):
        word_span("عين و عين", "عين")


@pytest.fixture(scope="module")
def tiny_encoder(tmp_path_factory):
    texts = ["الغزالة تشرب من النبع", "الطالب يقرأ الكتاب", "مستشفيات المدينة حديثة"] * 20
    return build_tiny_bert(tmp_path_factory.mktemp("tiny-bert"), texts, "BertForMaskedLM", vocab_size=60,
                           max_positions=64)


def tiny_occurrences(word="مستشفيات") -> list[Occurrence]:
    # Within a sense the sentences are identical, across senses their contexts differ: the contextual layers must
    # separate the senses perfectly; the word's own position and token are the same in all, so layer 0 cannot.
    return [Occurrence(word, "a", f"{word} الغزالة تشرب", line=i) for i in range(3)] + \
        [Occurrence(word, "b", f"{word} الطالب يقرأ", line=i) for i in range(3, 6)]


def test_encoder_vectors_average_the_words_subword_states(tiny_encoder):
    import torch
    from transformers import AutoModel, AutoTokenizer

    model = AutoModel.from_pretrained(tiny_encoder).eval()
    tokenizer = AutoTokenizer.from_pretrained(tiny_encoder)
    occurrences = tiny_occurrences()
    pieces = tokenizer.tokenize(occurrences[0].word)
    assert len(pieces) > 1  # the test is about averaging several subwords
    vectors = encoder_vectors(model, tokenizer, "none", occurrences, batch_size=4)
    assert list(vectors) == [STATIC_INPUT, "layer 0", "layer 1", "layer 2"]
    encoded = tokenizer(occurrences[3].text, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**encoded, output_hidden_states=True).hidden_states
    span = slice(1, 1 + len(pieces))  # after [CLS]
    for layer in range(3):
        np.testing.assert_allclose(vectors[f"layer {layer}"][3], hidden[layer][0, span].mean(0).numpy(), atol=1e-5)
    results = measure(occurrences, vectors)
    assert results["layer 1"]["accuracy"] == 1.0 and results["layer 2"]["accuracy"] == 1.0
    assert results["layer 0"]["accuracy"] == pytest.approx(0.5)
    assert results[STATIC_INPUT]["accuracy"] == pytest.approx(0.5)
    assert results[STATIC_INPUT]["same_sense_cosine"] == pytest.approx(1.0)


@pytest.mark.slow
def test_run_polysemy_writes_the_table_json_and_plot(tiny_encoder, tmp_path):
    data = tmp_path / "homographs.jsonl"
    data.write_text("".join(json.dumps({"word": o.word, "sense": o.sense, "text": o.text, "translit": "w"},
                                       ensure_ascii=False) + "\n" for o in tiny_occurrences()), encoding="utf-8")
    out = tmp_path / "results"
    report = run_polysemy(tiny_encoder, data, out)
    assert sorted(p.name for p in out.iterdir()) == ["pca.png", "polysemy.json", "polysemy.md"]
    saved = json.loads((out / "polysemy.json").read_text(encoding="utf-8"))
    assert saved["results"]["layer 2"]["accuracy"] == 1.0 == report["results"]["layer 2"]["accuracy"]
    assert "| layer 2 | 1.000 | 0.500 |" in (out / "polysemy.md").read_text(encoding="utf-8")
    assert (out / "pca.png").read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(ConfigError, match="--overwrite"):
        run_polysemy(tiny_encoder, data, out)


def test_the_committed_homograph_set():
    occurrences = read_homographs(SAMPLES / "polysemy" / "ar_homographs.jsonl")
    words = {}
    for o in occurrences:
        words.setdefault(o.word, {}).setdefault(o.sense, []).append(o)
    assert len(words) >= 10
    assert all(len(senses) >= 2 and min(map(len, senses.values())) >= 5 for senses in words.values())
    from arabert_pipeline.preprocess import Preprocessor

    preprocessor = Preprocessor("arabertv02")
    for o in occurrences:  # the homograph once, as a whole word, in its sentence as the shipped model sees it
        word_span(preprocessor.preprocess(o.text), preprocessor.preprocess(o.word), where=f"line {o.line}")
