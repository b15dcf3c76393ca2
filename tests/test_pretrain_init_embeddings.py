"""`pretrain --init-embeddings`: token embeddings that start from static word vectors (issue 27's lever), at tiny size
on test_pretrain's corpus slice and tokenizers."""
from __future__ import annotations

import numpy as np
import pytest

from arabert_pipeline.errors import ConfigError
from test_pretrain import corpus, tiny_config, tokenizer_dir, unigram_dir, workdir  # noqa: F401 (fixtures)

torch = pytest.importorskip("torch")
pytest.importorskip("gensim")


@pytest.fixture(scope="module")
def vectors(workdir, corpus):  # noqa: F811  an imported fixture
    from arabert_pipeline.embeddings.train import train_embeddings

    out = workdir / "w2v"
    if not out.exists():
        train_embeddings([corpus], out, model="word2vec", dim=16, min_count=2, epochs=2, workers=1,
                         preprocessing="none", progress=False)
    return out


def _expected_rows(tokenizer, vectors_dir) -> dict[int, np.ndarray]:
    """Token id → the vector of the word it is, read here from the vectors' own files (words.txt lines
    `word<TAB>count`, vectors.npy rows in their order): the pairing the start must have, taken without
    static_vector_rows. Word2vec has vectors for words only: whole-word tokens ("▁word" in SentencePiece, "word" but
    not "##piece" in WordPiece), never special tokens."""
    words = [line.split("\t")[0] for line in (vectors_dir / "words.txt").read_text(encoding="utf-8").splitlines()]
    by_word = dict(zip(words, np.load(vectors_dir / "vectors.npy", allow_pickle=False), strict=True))
    vocabulary = tokenizer.get_vocab()
    sentencepiece = any(token.startswith("▁") for token in vocabulary)
    expected = {}
    for token, index in vocabulary.items():
        if index in tokenizer.all_special_ids or token.startswith("##") or (sentencepiece and token[:1] != "▁"):
            continue
        word = token[1:] if sentencepiece else token
        if word in by_word:
            expected[index] = by_word[word]
    return expected


def _assert_started_from(table: np.ndarray, expected: dict[int, np.ndarray]) -> None:
    """The rows of `expected`'s tokens are their vectors through one orthonormal projection and scale: the centred
    vectors' inner products, up to that scale (a token given another word's vector changes them)."""
    ids = np.fromiter(expected, dtype=np.int64)
    started = table[ids]
    original = np.stack([expected[i] for i in ids]).astype(np.float64)
    original -= original.mean(0)
    scale = np.linalg.norm(started) / np.linalg.norm(original)
    np.testing.assert_allclose(started @ started.T, scale**2 * (original @ original.T), rtol=1e-4, atol=1e-9)


def _objective(tokenizer_path, corpus_path, output, **overrides):
    from transformers import AutoTokenizer

    from arabert_pipeline.pretrain.objectives import build_objective

    config = tiny_config(tokenizer_path, corpus_path, output, **overrides)
    config.validate()
    torch.manual_seed(0)  # the trainer seeds before it builds; the same random start for every build here
    return build_objective(config, AutoTokenizer.from_pretrained(tokenizer_path), "none"), config


@pytest.mark.parametrize("tokenizer_fixture", ["tokenizer_dir", pytest.param("unigram_dir", marks=pytest.mark.slow)])
def test_whole_word_tokens_start_from_their_vectors_at_the_init_scale(request, tokenizer_fixture, corpus, vectors,  # noqa: F811  an imported fixture
                                                                     tmp_path):
    from transformers import AutoTokenizer

    from arabert_pipeline.embeddings import Embeddings
    from arabert_pipeline.pretrain.objectives import static_vector_rows

    tokenizer_path = request.getfixturevalue(tokenizer_fixture)
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_path)
    expected = _expected_rows(tokenizer, vectors)
    assert len(expected) > 50
    rows = static_vector_rows(tokenizer, Embeddings.load(vectors))
    assert rows.keys() == expected.keys()
    assert all(np.array_equal(rows[i], expected[i]) for i in expected)
    objective, _ = _objective(tokenizer_path, corpus, tmp_path / "run", init_embeddings=str(vectors))
    table = objective.model.get_input_embeddings().weight.detach().double().numpy()
    ids = np.fromiter(expected, dtype=np.int64)
    assert table[ids].std() == pytest.approx(objective.model.config.initializer_range, rel=1e-3)
    _assert_started_from(table, expected)
    # The tokens without a vector keep the random start of a model built without --init-embeddings.
    plain, _ = _objective(tokenizer_path, corpus, tmp_path / "plain")
    others = np.setdiff1d(np.arange(len(table)), ids)
    np.testing.assert_array_equal(table[others], plain.model.get_input_embeddings().weight.detach().double().numpy()
                                  [others])


def test_a_run_with_static_vectors_trains_and_records_them(tokenizer_dir, corpus, vectors, tmp_path):  # noqa: F811  an imported fixture
    import json

    from transformers import AutoModelForMaskedLM, AutoTokenizer

    from arabert_pipeline.cli import main

    out = tmp_path / "run"
    # A learning rate too small to move a float32 weight: the exported table is the one the run started from.
    code = main(["pretrain", "--tokenizer", tokenizer_dir, "--corpus", corpus, "--model-size", "tiny", "-o", str(out),
                 "--max-seq-length", "32", "--steps", "4", "--batch-size", "8", "--eval-every", "4", "--lr", "1e-20",
                 "--eval-sequences", "16", "--init-embeddings", str(vectors), "--cache-dir", str(tmp_path / "cache"),
                 "--no-progress"])
    assert code == 0
    recorded = json.loads((out / "arabert_pipeline.json").read_text(encoding="utf-8"))
    assert recorded["pretrain"]["config"]["init_embeddings"] == str(vectors) and recorded["pretrain"]["steps"] == 4
    # The run's own start, not just the recorded path: the exported rows of the words with a vector are the vectors
    # through one orthonormal projection and scale (their inner products kept), as the objective built here has them.
    expected = _expected_rows(AutoTokenizer.from_pretrained(tokenizer_dir), vectors)
    ids = np.fromiter(expected, dtype=np.int64)
    table = AutoModelForMaskedLM.from_pretrained(out).get_input_embeddings().weight.detach().double().numpy()
    _assert_started_from(table, expected)
    exported = table[ids]
    built, _ = _objective(tokenizer_dir, corpus, tmp_path / "built", init_embeddings=str(vectors))
    np.testing.assert_allclose(exported, built.model.get_input_embeddings().weight.detach().double().numpy()[ids],
                               rtol=0, atol=1e-9)


def test_wrong_vectors_are_refused_by_name(tokenizer_dir, corpus, vectors, tmp_path):  # noqa: F811  an imported fixture
    import json
    import shutil

    with pytest.raises(ConfigError, match="--init-embeddings.*--init-from"):
        tiny_config(tokenizer_dir, corpus, tmp_path / "x", init_embeddings=str(vectors),
                    init_from=str(tmp_path)).validate()
    other = tmp_path / "v02"
    shutil.copytree(vectors, other)
    metadata = json.loads((other / "arabert_pipeline.json").read_text(encoding="utf-8"))
    (other / "arabert_pipeline.json").write_text(json.dumps({**metadata, "preprocessing": "arabertv02"}),
                                                 encoding="utf-8")
    with pytest.raises(ConfigError, match="'arabertv02' text.*'none'"):
        _objective(tokenizer_dir, corpus, tmp_path / "run", init_embeddings=str(other))
