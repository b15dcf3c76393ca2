"""The static-vector BiLSTM baseline of every NER table: a tagger whose only pretrained part is a table of word vectors.

    vectors = load_vectors("arabert_pipeline/models/arabert-mini")   # the shipped reader's word2vec table
    tagger = fit_bilstm(train_sentences, dev_sentences, vectors, seed=0)
    tagger.predict([["زار", "ماكرون", "بيروت"]])

Each word is its static vector (frozen; the word preprocessed as the vectors' corpus was, the mean of its tokens'
vectors when preprocessing splits it, a learned "unknown" vector when the table has none of them), a flag saying
whether it had one, and a character CNN over the word as written (25-dimensional characters, 50 filters of width 3,
max-pooled: names the table never saw still have a shape); two stacked BiLSTMs of 100 per direction (DrQA's, shared
with the static QA reader: finetuning/rnn.py) and a softmax over the BIO tags per word (no CRF layer: an I-X after O is
read as B-X by the scorer, as seqeval does). Adam at 2e-3, batches of 32 sentences, dropout 0.5, at most 15 epochs,
stopping after 3 without a better dev entity micro-F1; the best dev epoch is kept (`chosen`).

The vectors are a `train-embeddings` directory (embeddings/vectors.py reads it) or a QA model dir holding a reader
(`reader/`: the word2vec table that `tune-decoding --reader` ships, float16, its words.txt and the checksums of both in
reader.json). By default the shipped model's: word2vec skip-gram, 100 dimensions, 124,569 words of the pretraining
corpus (its 1,000 most frequent QA-question words fine-tuned by the reader's training, as its card says).
"""
from __future__ import annotations

import contextlib
import copy
import logging
import os
import random
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..artifacts.metadata import read_metadata
from ..artifacts.paths import portable_path
from ..artifacts.reads import read_json_file
from ..embeddings.vectors import Embeddings, read_words_and_digest
from ..errors import ConfigError, InputError
from ..weights.files import file_digest
from ..weights.tables import READER_TABLE, read_table, table_rows
from .metrics import ner_report

log = logging.getLogger(__name__)

DEFAULT_VECTORS = Path(__file__).resolve().parents[1] / "models" / "arabert-mini"
HIDDEN, LAYERS, DROPOUT, LR, BATCH = 100, 2, 0.5, 2e-3, 32
MAX_EPOCHS, PATIENCE = 15, 3
CHAR_DIM, CHAR_FILTERS, CHAR_WIDTH, MAX_WORD_CHARS = 25, 50, 3, 20
PAD_TAG = -100


def load_vectors(source: str | os.PathLike | Embeddings | None = None) -> Embeddings:
    """Word vectors from a train-embeddings dir, a QA model dir with a reader/ (or that reader/ itself), or as given."""
    if isinstance(source, Embeddings):
        return source
    path = Path(source) if source is not None else DEFAULT_VECTORS
    if (path / "arabert_pipeline.json").is_file() and read_metadata(path).get("task") == "word-embeddings":
        return Embeddings.load(path)
    reader = path / "reader" if (path / "reader" / "reader.json").is_file() else path
    if not (reader / "reader.json").is_file():
        raise ConfigError(f"{path}: neither word vectors (a train-embeddings directory) nor a model dir with a reader/ "
                          "(the shipped arabert-mini has one)")
    return _reader_table(reader)


def _reader_table(reader: Path) -> Embeddings:
    """A shipped reader's word table as Embeddings: rows 0 and 1 (padding, unknown) left out, checked against the
    checksums reader.json records."""
    from ..preprocess import PREPROCESSING_NAMES

    config = read_json_file(reader / "reader.json")
    preprocessing, dim, count = config.get("preprocessing"), config.get("dim"), config.get("words")
    if preprocessing not in PREPROCESSING_NAMES or type(dim) is not int or type(count) is not int or dim < 1:
        raise ConfigError(f"{reader / 'reader.json'}: expected its preprocessing, dim and words")
    words, words_sha256 = read_words_and_digest(reader / "words.txt", count, "words reader.json records")
    if words_sha256 != config.get("words_sha256") or not (reader / READER_TABLE).is_file() \
            or file_digest(reader / READER_TABLE) != config.get("table_sha256"):
        raise ConfigError(f"{reader}: words.txt or {READER_TABLE} is missing or not the file reader.json records")
    table, scales = read_table(reader, config, len(words) + 2)  # int8 rows (issue 53): with their checked scales
    return Embeddings(words, table_rows(table, scales, np.arange(2, len(table))), preprocessing=preprocessing,
                      source=reader, words_sha256=words_sha256)


class WordVectors:
    """Word as written → its static vector (None when the table has none of its tokens), computed once per form."""

    def __init__(self, embeddings: Embeddings):
        self.embeddings = embeddings
        self.cache: dict[str, np.ndarray | None] = {}

    def __call__(self, word: str) -> np.ndarray | None:
        if word not in self.cache:
            found = []
            try:
                tokens = self.embeddings.query_tokens(word)
            except InputError:  # nothing left once preprocessed
                tokens = []
            for token in tokens:
                with contextlib.suppress(InputError):  # a word2vec token out of the vocabulary: no vector
                    found.append(self.embeddings.token_vector(token))
            self.cache[word] = np.mean(found, axis=0).astype(np.float32) if found else None
        return self.cache[word]

    def coverage(self, sentences: Sequence[Sequence[str]]) -> float:
        words = [w for s in sentences for w in s]
        return 100.0 * sum(self(w) is not None for w in words) / max(len(words), 1)


def _network(dim: int, n_chars: int, n_tags: int):
    import torch
    from torch import nn

    from ..finetuning.rnn import StackedBiLSTM

    class Network(nn.Module):
        def __init__(self):
            super().__init__()
            self.chars = nn.Embedding(n_chars, CHAR_DIM, padding_idx=0)
            self.conv = nn.Conv1d(CHAR_DIM, CHAR_FILTERS, CHAR_WIDTH, padding=CHAR_WIDTH // 2)
            self.unknown = nn.Parameter(torch.zeros(dim))
            self.rnn = StackedBiLSTM(dim + 1 + CHAR_FILTERS, HIDDEN, LAYERS, DROPOUT)
            self.out = nn.Linear(2 * HIDDEN * LAYERS, n_tags)

        def forward(self, vectors, known, chars, lengths):
            words = torch.where(known.unsqueeze(-1), vectors, self.unknown)
            b, t, c = chars.shape
            shapes = self.conv(self.chars(chars.view(b * t, c)).transpose(1, 2)).relu().amax(-1).view(b, t, -1)
            hidden = self.rnn(torch.cat([words, known.unsqueeze(-1).float(), shapes], -1), lengths)
            return self.out(hidden)

    return Network()


class BiLSTMTagger:
    """A fitted BiLSTM: `predict(sentences)` → BIO tags per word, as ner/baselines.py's Tagger."""

    name = "bilstm"

    def __init__(self, network, vectors: WordVectors, chars: dict[str, int], tags: list[str]):
        self.network, self.vectors, self.char_index, self.tags = network, vectors, chars, tags
        self.chosen: dict = {}

    def batch(self, sentences: Sequence[Sequence[str]]):
        import torch

        n, longest = len(sentences), max(len(s) for s in sentences)
        dim = self.vectors.embeddings.dim
        vectors = np.zeros((n, longest, dim), dtype=np.float32)
        known = np.zeros((n, longest), dtype=bool)
        chars = np.zeros((n, longest, MAX_WORD_CHARS), dtype=np.int64)
        for i, words in enumerate(sentences):
            for j, word in enumerate(words):
                vector = self.vectors(word)
                if vector is not None:
                    vectors[i, j], known[i, j] = vector, True
                ids = [self.char_index.get(ch, 1) for ch in word[:MAX_WORD_CHARS]]
                chars[i, j, :len(ids)] = ids
        lengths = torch.tensor([len(s) for s in sentences])
        return torch.from_numpy(vectors), torch.from_numpy(known), torch.from_numpy(chars), lengths

    def predict(self, sentences: Sequence[Sequence[str]], batch_size: int = 64) -> list[list[str]]:
        import torch

        self.network.eval()
        out: list[list[str]] = [[] for _ in sentences]
        order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))
        with torch.no_grad():
            for first in range(0, len(order), batch_size):
                rows = [i for i in order[first: first + batch_size] if len(sentences[i])]
                if not rows:
                    continue
                best = self.network(*self.batch([sentences[i] for i in rows])).argmax(-1)
                for k, i in enumerate(rows):
                    out[i] = [self.tags[t] for t in best[k, :len(sentences[i])].tolist()]
        return out


def fit_bilstm(train: Sequence[dict], dev: Sequence[dict], vectors=None, *, seed: int = 0,
               max_epochs: int = MAX_EPOCHS, patience: int = PATIENCE) -> BiLSTMTagger:
    """Train on sentences {"words", "tags"}, keeping the epoch of the best dev entity micro-F1 (the last epoch when no
    dev set is given)."""
    import torch

    train = [e for e in train if e["words"]]
    if not train:
        raise ConfigError("the BiLSTM baseline needs training sentences")
    embeddings = load_vectors(vectors)
    torch.manual_seed(seed)
    rng = random.Random(seed)
    tags = sorted({t for e in train for t in e["tags"]} | {"O"})
    tag_index = {t: i for i, t in enumerate(tags)}
    chars = {ch: i + 2 for i, ch in enumerate(sorted({ch for e in train for w in e["words"] for ch in w}))}
    tagger = BiLSTMTagger(_network(embeddings.dim, len(chars) + 2, len(tags)), WordVectors(embeddings), chars, tags)
    optimizer = torch.optim.Adam(tagger.network.parameters(), lr=LR)
    coverage = tagger.vectors.coverage([e["words"] for e in train])
    log.info("BiLSTM baseline: %.1f%% of the training words have a static vector (%s)", coverage, embeddings.source)
    scores: dict[int, float] = {}
    best_state, best_epoch = None, 0
    for epoch in range(1, max_epochs + 1):
        tagger.network.train()
        order = list(range(len(train)))
        rng.shuffle(order)
        for first in range(0, len(order), BATCH):
            items = [train[i] for i in order[first: first + BATCH]]
            inputs = tagger.batch([e["words"] for e in items])
            gold = torch.full(inputs[1].shape, PAD_TAG, dtype=torch.long)
            for k, e in enumerate(items):
                gold[k, :len(e["tags"])] = torch.tensor([tag_index.get(t, tag_index["O"]) for t in e["tags"]])
            logits = tagger.network(*inputs)
            loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), gold.flatten(), ignore_index=PAD_TAG)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(tagger.network.parameters(), 5.0)
            optimizer.step()
        if not dev:
            best_epoch = epoch
            continue
        scores[epoch] = ner_report([e["tags"] for e in dev], tagger.predict([e["words"] for e in dev]))["micro_f1"]
        log.info("BiLSTM baseline epoch %d: dev micro_f1 %.2f", epoch, scores[epoch])
        if best_state is None or scores[epoch] > scores[best_epoch]:
            best_state, best_epoch = copy.deepcopy(tagger.network.state_dict()), epoch
        elif epoch - best_epoch >= patience:
            break
    if best_state is not None:
        tagger.network.load_state_dict(best_state)
    tagger.chosen = {"epoch": best_epoch, "dev_metric": "micro_f1",
                     "dev_scores": {str(k): round(v, 2) for k, v in scores.items()},
                     "vectors": f"{portable_path(embeddings.source)} ({len(embeddings):,} words, {embeddings.dim} "
                                f"dimensions, {embeddings.preprocessing}, words.txt sha256 "
                                f"{(embeddings.words_sha256 or '?')[:12]})",
                     "train_words_with_a_vector": round(coverage, 1)}
    return tagger
