"""The NER table's static-vector BiLSTM baseline (ner/bilstm.py): it learns a toy whose tags need the context, and it
reads the shipped model's word table."""
from __future__ import annotations

import random

import numpy as np
import pytest

pytest.importorskip("torch")

from arabert_pipeline.embeddings import Embeddings
from arabert_pipeline.ner.baselines import fit_baseline
from arabert_pipeline.ner.bilstm import DEFAULT_VECTORS, WordVectors, load_vectors
from arabert_pipeline.ner.metrics import ner_report

# The same names are people after a title and places after "مدينة": no word alone decides its tag.
NAMES = ["حمدان", "سلمان", "نجران", "عدنان", "ريان", "مروان"]
VERBS, OTHER = ["زار", "سكن", "أحب", "ترك"], ["أمس", "اليوم", "مع", "كثيرا"]


def toy(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        words, tags = ["السيد", rng.choice(NAMES)], ["O", "B-PERS"]
        if rng.random() < 0.5:
            words += ["بن", rng.choice(NAMES)]
            tags += ["I-PERS", "I-PERS"]
        words += [rng.choice(VERBS), "مدينة", rng.choice(NAMES), rng.choice(OTHER)]
        tags += ["O", "O", "B-LOC", "O"]
        out.append({"id": str(i), "words": words, "tags": tags})
    return out


def toy_vectors() -> Embeddings:
    words = ["السيد", "بن", "مدينة", *NAMES[:4], *VERBS, *OTHER]  # two names without a vector
    return Embeddings(words, np.random.default_rng(0).normal(size=(len(words), 16)), preprocessing="none")


@pytest.mark.slow
def test_bilstm_learns_a_tagging_toy():
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        tagger = fit_baseline("bilstm", toy(160, 0), toy(40, 1), seed=0, vectors=toy_vectors())
    finally:
        torch.set_num_threads(threads)
    test = toy(60, 2)
    predicted = tagger.predict([e["words"] for e in test])
    assert [len(p) for p in predicted] == [len(e["words"]) for e in test]
    assert ner_report([e["tags"] for e in test], predicted)["micro_f1"] >= 95
    assert tagger.chosen["dev_metric"] == "micro_f1" and tagger.chosen["epoch"] >= 1
    assert tagger.chosen["train_words_with_a_vector"] < 100  # the two names without a vector


def test_a_word_without_vectors_and_a_split_word():
    vectors = WordVectors(toy_vectors())
    assert vectors("غير_موجود") is None
    assert vectors("السيد").shape == (16,)


@pytest.mark.skipif(not (DEFAULT_VECTORS / "reader" / "reader.json").is_file(), reason="no shipped reader")
def test_the_shipped_reader_table_reads_as_embeddings():
    embeddings = load_vectors()
    assert (len(embeddings), embeddings.dim, embeddings.preprocessing) == (124_569, 100, "arabertv02")
    assert WordVectors(embeddings)("بيروت") is not None


def test_a_reader_table_in_int8_rows_needs_its_recorded_float32_scales(tmp_path):
    """The reader's table is read by weights.tables.read_table, as the QA reader reads it: int8 rows without their
    scales file, or with scales of another dtype, are a ConfigError naming the file."""
    import hashlib
    import json

    from arabert_pipeline.errors import ConfigError
    from arabert_pipeline.weights.files import file_digest
    from arabert_pipeline.weights.rows import quantize_rows

    reader = tmp_path / "reader"
    reader.mkdir()
    words = "".join(f"{w}\t1\n" for w in NAMES).encode("utf-8")
    (reader / "words.txt").write_bytes(words)
    values = np.random.default_rng(0).normal(size=(len(NAMES) + 2, 8)).astype(np.float32)
    quantized, scales = quantize_rows(values)
    np.save(reader / "vectors.npy", quantized, allow_pickle=False)
    config = {"preprocessing": "arabertv02", "dim": 8, "words": len(NAMES),
              "words_sha256": hashlib.sha256(words).hexdigest(), "table_sha256": file_digest(reader / "vectors.npy")}
    (reader / "reader.json").write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(ConfigError, match="vector_scales.npy is missing or not the file reader.json records"):
        load_vectors(tmp_path)
    np.save(reader / "vector_scales.npy", scales.reshape(-1).astype(np.float64), allow_pickle=False)
    config["scales_sha256"] = file_digest(reader / "vector_scales.npy")
    (reader / "reader.json").write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(ConfigError, match="float32, found"):
        load_vectors(tmp_path)
    np.save(reader / "vector_scales.npy", scales.reshape(-1), allow_pickle=False)
    config["scales_sha256"] = file_digest(reader / "vector_scales.npy")
    (reader / "reader.json").write_text(json.dumps(config), encoding="utf-8")
    embeddings = load_vectors(tmp_path)
    assert len(embeddings) == len(NAMES) and np.array_equal(embeddings.vectors, (quantized * scales)[2:])
