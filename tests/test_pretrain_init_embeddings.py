"""`pretrain --init-embeddings`: token embeddings that start from static word vectors (issue 27's lever), at tiny size
on test_pretrain's corpus slice and tokenizers."""
from __future__ import annotations

import numpy as np
import pytest

from test_pretrain import corpus, tiny_config, tokenizer_dir, unigram_dir, workdir  # noqa: F401 (fixtures)

from arabert_pipeline.errors import ConfigError

torch = pytest.importorskip("torch")
pytest.importorskip("gensim")


@pytest.fixture(scope="module")
def vectors(workdir, corpus):  # noqa: F811
    from arabert_pipeline.embeddings.train import train_embeddings

    out = workdir / "w2v"
    if not out.exists():
        train_embeddings([corpus], out, model="word2vec", dim=16, min_count=2, epochs=2, workers=1,
                         preprocessing="none", progress=False)
    return out


def _objective(tokenizer_path, corpus_path, output, **overrides):
    from transformers import AutoTokenizer

    from arabert_pipeline.pretrain.objectives import build_objective

    config = tiny_config(tokenizer_path, corpus_path, output, **overrides)
    config.validate()
    torch.manual_seed(0)  # the trainer seeds before it builds; the same random start for every build here
    return build_objective(config, AutoTokenizer.from_pretrained(tokenizer_path), "none"), config


@pytest.mark.parametrize("tokenizer_fixture", ["tokenizer_dir", "unigram_dir"])
def test_whole_word_tokens_start_from_their_vectors_at_the_init_scale(request, tokenizer_fixture, corpus, vectors,
                                                                     tmp_path):  # noqa: F811
    from transformers import AutoTokenizer

    from arabert_pipeline.embeddings import Embeddings
    from arabert_pipeline.pretrain.objectives import static_vector_rows

    tokenizer_path = request.getfixturevalue(tokenizer_fixture)
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_path)
    static = Embeddings.load(vectors)
    rows = static_vector_rows(tokenizer, static)
    assert len(rows) > 50
    sentencepiece = tokenizer_fixture == "unigram_dir"
    for index in rows:  # only whole-word tokens (word2vec has no vectors for pieces), never special tokens
        token = tokenizer.convert_ids_to_tokens(index)
        assert (token.startswith("▁") if sentencepiece else not token.startswith("##"))
        assert index not in tokenizer.all_special_ids
    objective, _ = _objective(tokenizer_path, corpus, tmp_path / "run", init_embeddings=str(vectors))
    table = objective.model.get_input_embeddings().weight.detach().double().numpy()
    ids = np.fromiter(rows, dtype=np.int64)
    started = table[ids]
    assert started.std() == pytest.approx(objective.model.config.initializer_range, rel=1e-3)
    # An orthonormal projection and one scale: the centred vectors' inner products, up to that scale.
    original = np.stack([rows[i] for i in ids]).astype(np.float64)
    original -= original.mean(0)
    scale = np.linalg.norm(started) / np.linalg.norm(original)
    np.testing.assert_allclose(started @ started.T, scale**2 * (original @ original.T), rtol=1e-4, atol=1e-9)
    # The tokens without a vector keep the random start of a model built without --init-embeddings.
    plain, _ = _objective(tokenizer_path, corpus, tmp_path / "plain")
    others = np.setdiff1d(np.arange(len(table)), ids)
    np.testing.assert_array_equal(table[others], plain.model.get_input_embeddings().weight.detach().double().numpy()
                                  [others])


def test_a_run_with_static_vectors_trains_and_records_them(tokenizer_dir, corpus, vectors, tmp_path):  # noqa: F811
    import json

    from transformers import AutoModelForMaskedLM, AutoTokenizer

    from arabert_pipeline.cli import main
    from arabert_pipeline.embeddings import Embeddings
    from arabert_pipeline.pretrain.objectives import static_vector_rows

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
    rows = static_vector_rows(AutoTokenizer.from_pretrained(tokenizer_dir), Embeddings.load(vectors))
    ids = np.fromiter(rows, dtype=np.int64)
    exported = AutoModelForMaskedLM.from_pretrained(out).get_input_embeddings().weight.detach().double().numpy()[ids]
    original = np.stack([rows[i] for i in ids]).astype(np.float64)
    original -= original.mean(0)
    scale = np.linalg.norm(exported) / np.linalg.norm(original)
    np.testing.assert_allclose(exported @ exported.T, scale**2 * (original @ original.T), rtol=1e-4, atol=1e-9)
    built, _ = _objective(tokenizer_dir, corpus, tmp_path / "built", init_embeddings=str(vectors))
    np.testing.assert_allclose(exported, built.model.get_input_embeddings().weight.detach().double().numpy()[ids],
                               rtol=0, atol=1e-9)


def test_wrong_vectors_are_refused_by_name(tokenizer_dir, corpus, vectors, tmp_path):  # noqa: F811
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
