"""A reader without a pretrained transformer: DrQA's document reader (Chen et al. 2017) over static word vectors.

    train_reader(ReaderConfig(embeddings="runs/ft", train=["arcd-train"], dev=["arcd-dev"], output_dir="runs/rd"))
    StaticReader.load("runs/rd").predict(examples)   # {id: {"text", "start"}}: what `evaluate --predictions` reads

Words are the whitespace tokens of the context once preprocessed the way the embeddings' corpus was (with arabertv2,
Farasa segments such as `ال+` are words of their own), so every word has the vector it was trained with. A predicted
word span goes back to an exact span of the original context through QAPreprocessing's offset map, and gold answers
come in the same way (an answer that does not map is skipped and counted, never guessed).

The model: frozen word vectors (the `tune_top_k` most frequent training-question words fine-tuned, as DrQA does:
question words like "متى" carry what the answer looks like), stacked BiLSTMs over context and question, context
features (the word is a question word: surface form, and overlap.py's match keys, which forgive clitics and spelling
variants; term frequency; the aligned question embedding), a self-attentive question summary and two bilinear
pointers. Decoding takes the span with end >= start and at most `max_span_words` words maximising p_start * p_end.

The output directory (built under a temporary name, locked while written):

    reader.safetensors     the weights, without the frozen vectors (read again from the embeddings directory, whose
                           words.txt and vectors checksums are recorded as they were read at the start of training,
                           so a changed directory is refused rather than misread)
    reader_config.json     the architecture, the vocabulary source and the fine-tuned words (checked field by field
                           at load: read_reader_config)
    arabert_pipeline.json  task "static-reader", preprocessing, per-epoch dev scores and the epoch kept
"""
from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import re
import time
from pathlib import Path
from typing import Any

import numpy as np

from ..artifacts import (
    METADATA_FILE,
    OutputKind,
    OutputLock,
    atomic_directory,
    atomic_write,
    claim_output_dir,
    portable_path,
    read_json_file,
    read_metadata,
    remove_stale_temporaries,
    write_metadata,
)
from ..errors import ConfigError, InputError
from ..version import __version__

log = logging.getLogger(__name__)

TASK = "static-reader"
WEIGHTS_FILE, CONFIG_FILE = "reader.safetensors", "reader_config.json"
READER_OUTPUT = OutputKind("train-reader", names=(WEIGHTS_FILE, CONFIG_FILE, METADATA_FILE), markers=(WEIGHTS_FILE,))
PAD, UNK = 0, 1  # rows before the embeddings' own words
# The largest sizes train-reader writes and a load accepts: DrQA's reader is 3 layers of 128 reading spans of 15 words;
# past these a number is a damaged file or a typo (10^6 layers would fill the memory before anything could refuse it).
SIZE_LIMITS = {"hidden": 4096, "layers": 32, "max_span_words": 1000}
_SHA256 = re.compile(r"[0-9a-f]{64}")
N_FEATURES = 3  # surface match, match-key match, term frequency
_WORD = re.compile(r"\S+")


@dataclasses.dataclass
class ReaderConfig:
    """Options of `train_reader`; the fields mirror the flags of `arabert-pipeline train-reader`."""

    embeddings: str
    train: list[str]
    dev: list[str]
    output_dir: str
    # Sets the reader is later scored on: never read here except to drop the training questions that leak into them
    # (finetune --drop-leaking-train's guard, always on for these: a comparison row must not see its test).
    hold_out: list[str] = dataclasses.field(default_factory=list)
    hidden: int = 128
    layers: int = 3
    dropout: float = 0.3
    epochs: int = 20
    batch_size: int = 32
    lr: float = 2e-3  # Adamax, DrQA's optimiser and rate
    tune_top_k: int = 1000  # 0: every vector frozen
    max_span_words: int = 15
    seed: int = 42
    overwrite: bool = False
    progress: bool = True


# --------------------------------------------------------------------------------------------------------------------
# Words, features and gold spans


@dataclasses.dataclass
class Encoded:
    id: str
    context: str
    aligned: Any  # AlignedText
    word_spans: np.ndarray  # (n, 2) character spans of the words in aligned.text
    context_ids: np.ndarray
    features: np.ndarray  # (n, N_FEATURES)
    question_ids: np.ndarray
    gold: tuple[int, int] | None  # first aligned answer as (first word, last word)


def word_spans(text: str) -> np.ndarray:
    spans = [(m.start(), m.end()) for m in _WORD.finditer(text)]
    return np.asarray(spans, dtype=np.int64).reshape(len(spans), 2)


def word_features(context_words: list[str], question_words: list[str]) -> np.ndarray:
    from .overlap import match_keys

    surface = set(question_words)
    keys = frozenset().union(*map(match_keys, question_words)) if question_words else frozenset()
    counts: dict[str, int] = {}
    for word in context_words:
        counts[word] = counts.get(word, 0) + 1
    n = max(len(context_words), 1)
    return np.asarray([[word in surface, not keys.isdisjoint(match_keys(word)), counts[word] / n]
                       for word in context_words], dtype=np.float32).reshape(len(context_words), N_FEATURES)


def _char_span_to_words(word_spans: np.ndarray, start: int, end: int) -> tuple[int, int] | None:
    """The words a preprocessed character span [start, end) touches: a gold answer cut inside a word takes it whole,
    as the metric's normalisation would read it anyway."""
    touched = np.flatnonzero((word_spans[:, 0] < end) & (word_spans[:, 1] > start))
    return (int(touched[0]), int(touched[-1])) if touched.size else None


class Vocabulary:
    """Word → row of the reader's embedding table: PAD, UNK, then the embeddings' words in their order."""

    def __init__(self, words: list[str]):
        self.index = {word: i + 2 for i, word in enumerate(words)}

    def ids(self, words: list[str]) -> np.ndarray:
        return np.asarray([self.index.get(w, UNK) for w in words], dtype=np.int64)


def encode_examples(examples: list[dict], preprocessing, vocabulary: Vocabulary) -> tuple[list[Encoded], list[str]]:
    """Encoded examples (all of them, gold None where no answer aligns) and the ids whose answers did not align."""
    from .align import align_examples

    aligned_examples, _ = align_examples(examples, preprocessing)
    out, unaligned = [], []
    for example, item in zip(examples, aligned_examples):
        aligned = item["aligned"]
        spans = word_spans(aligned.text)
        context_words = [aligned.text[a:b] for a, b in spans]
        question_words = item["question"].split()
        gold = None
        for start, end in item["spans"]:
            gold = _char_span_to_words(spans, start, end)
            if gold is not None:
                break
        if gold is None and (example.get("answers") or {}).get("text"):
            unaligned.append(item["id"])
        if not context_words or not question_words:
            raise InputError("context or question is empty once preprocessed", field=f"question {item['id']}")
        out.append(Encoded(item["id"], example["context"], aligned, spans, vocabulary.ids(context_words),
                           word_features(context_words, question_words), vocabulary.ids(question_words), gold))
    return out, unaligned


# --------------------------------------------------------------------------------------------------------------------
# The model


def _build_model(vectors: np.ndarray, tuned_rows: np.ndarray, hidden: int, layers: int, dropout: float):
    import torch
    from torch import nn

    class StackedBiLSTM(nn.Module):
        """DrQA's encoder: BiLSTM layers whose outputs are all concatenated, dropout on every layer's input."""

        def __init__(self, size_in: int):
            super().__init__()
            self.rnns = nn.ModuleList(nn.LSTM(size_in if i == 0 else 2 * hidden, hidden, batch_first=True,
                                              bidirectional=True) for i in range(layers))

        def forward(self, x, lengths=None):
            """`lengths` None: one unpadded sequence (the graph reader_companion.py exports)."""
            outputs = []
            for rnn in self.rnns:
                x = nn.functional.dropout(x, dropout, self.training)
                if lengths is None:
                    x = rnn(x)[0]
                else:
                    # Packed, so that the backward direction starts at each sequence's own last word, not at padding:
                    # an answer must not depend on which other questions share its batch.
                    packed = nn.utils.rnn.pack_padded_sequence(x, lengths.cpu(), batch_first=True,
                                                               enforce_sorted=False)
                    x, _ = nn.utils.rnn.pad_packed_sequence(rnn(packed)[0], batch_first=True,
                                                            total_length=x.shape[1])
                outputs.append(x)
            return nn.functional.dropout(torch.cat(outputs, dim=-1), dropout, self.training)

    class Reader(nn.Module):
        def __init__(self):
            super().__init__()
            dim = vectors.shape[1]
            table = np.zeros((len(vectors) + 2, dim), dtype=np.float32)
            table[2:] = vectors
            # Not persistent: the vectors are the embeddings directory's, saved once there, not in every reader.
            self.register_buffer("frozen", torch.from_numpy(table), persistent=False)
            slot = np.zeros(len(table), dtype=np.int64)
            slot[tuned_rows] = np.arange(1, len(tuned_rows) + 1)
            self.register_buffer("slot", torch.from_numpy(slot), persistent=False)
            self.tuned = nn.Embedding(len(tuned_rows) + 1, dim)
            with torch.no_grad():
                self.tuned.weight[0].zero_()
                self.tuned.weight[1:] = torch.from_numpy(table[tuned_rows])
            self.align = nn.Linear(dim, dim)
            self.context_rnn = StackedBiLSTM(2 * dim + N_FEATURES)
            self.question_rnn = StackedBiLSTM(dim)
            size = 2 * hidden * layers
            self.self_attention = nn.Linear(size, 1)
            self.start = nn.Linear(size, size, bias=False)
            self.end = nn.Linear(size, size, bias=False)

        def embed(self, ids):
            slot = self.slot[ids]
            return torch.where((slot > 0).unsqueeze(-1), self.tuned(slot), self.frozen[ids])

        def forward(self, context, features, question):
            c_mask, q_mask = context != PAD, question != PAD
            start, end = self.read(self.embed(context), features, self.embed(question), c_mask, q_mask)
            return start.masked_fill(~c_mask, float("-inf")), end.masked_fill(~c_mask, float("-inf"))

        def read(self, c_emb, features, q_emb, c_mask=None, q_mask=None):
            """Start and end logits from embedded words; masks None: one question, no padding."""
            c_emb = nn.functional.dropout(c_emb, dropout, self.training)
            q_emb = nn.functional.dropout(q_emb, dropout, self.training)
            # Aligned question embedding: each context word gets the question words it resembles, softly.
            c_proj, q_proj = torch.relu(self.align(c_emb)), torch.relu(self.align(q_emb))
            scores = c_proj @ q_proj.transpose(1, 2)
            if q_mask is not None:
                scores = scores.masked_fill(~q_mask.unsqueeze(1), float("-inf"))
            aligned = torch.softmax(scores, dim=-1) @ q_emb
            c_hidden = self.context_rnn(torch.cat([c_emb, aligned, features], dim=-1),
                                        None if c_mask is None else c_mask.sum(1))
            q_hidden = self.question_rnn(q_emb, None if q_mask is None else q_mask.sum(1))
            weights = self.self_attention(q_hidden).squeeze(-1)
            if q_mask is not None:
                weights = weights.masked_fill(~q_mask, float("-inf"))
            summary = (torch.softmax(weights, dim=-1).unsqueeze(-1) * q_hidden).sum(1)
            start = (c_hidden @ self.start(summary).unsqueeze(-1)).squeeze(-1)
            end = (c_hidden @ self.end(summary).unsqueeze(-1)).squeeze(-1)
            return start, end

    return Reader()


def _batch(items: list[Encoded]):
    import torch

    n_c = max(len(e.context_ids) for e in items)
    n_q = max(len(e.question_ids) for e in items)
    context = torch.zeros(len(items), n_c, dtype=torch.long)
    question = torch.zeros(len(items), n_q, dtype=torch.long)
    features = torch.zeros(len(items), n_c, N_FEATURES)
    for row, e in enumerate(items):
        context[row, : len(e.context_ids)] = torch.from_numpy(e.context_ids)
        question[row, : len(e.question_ids)] = torch.from_numpy(e.question_ids)
        features[row, : len(e.context_ids)] = torch.from_numpy(e.features)
    return context, features, question


def best_spans(start_logits, end_logits, max_span_words: int) -> list[tuple[int, int]]:
    """Per row, (first word, last word) maximising p_start * p_end with first <= last < first + max_span_words."""
    import torch

    log_start, log_end = torch.log_softmax(start_logits, -1), torch.log_softmax(end_logits, -1)
    n = start_logits.shape[1]
    # One diagonal band per span length: n × max_span_words scores, not the n × n of every pair.
    padded_end = torch.nn.functional.pad(log_end, (0, max_span_words - 1), value=float("-inf"))
    band = torch.stack([log_start + padded_end[:, k: k + n] for k in range(max_span_words)], dim=-1)
    flat = band.flatten(1).argmax(1)
    starts, lengths = flat // max_span_words, flat % max_span_words
    return [(int(a), int(a + k)) for a, k in zip(starts, lengths)]


def _predict(model, encoded: list[Encoded], max_span_words: int, batch_size: int = 64) -> dict[str, dict]:
    import torch

    model.eval()
    answers = {}
    with torch.no_grad():
        for first in range(0, len(encoded), batch_size):
            items = encoded[first: first + batch_size]
            start, end = model(*_batch(items))
            spans = best_spans(start, end, max_span_words)
            for e, (a, b) in zip(items, spans):
                lo, hi = e.aligned.to_original_many(e.word_spans[[a], 0], e.word_spans[[b], 1])
                lo, hi = int(lo[0]), int(hi[0])
                answers[e.id] = {"text": e.context[lo:hi], "start": lo}
    return answers


def _dev_scores(examples: list[dict], answers: dict[str, dict]) -> dict[str, float]:
    from .metrics import arabic_normalize, exact_match, token_f1

    em = f1 = 0.0
    scored = 0
    for example in examples:
        golds = list(example["answers"]["text"])
        if not golds:
            continue
        text = answers[example["id"]]["text"]
        em += max(exact_match(text, g, arabic_normalize) for g in golds)
        f1 += max(token_f1(text, g, arabic_normalize, empty_matches_empty=True) for g in golds)
        scored += 1
    return {"em": 100 * em / max(scored, 1), "f1": 100 * f1 / max(scored, 1)}


# --------------------------------------------------------------------------------------------------------------------
# Training


def check_config(config: ReaderConfig) -> None:
    for name, high in SIZE_LIMITS.items():
        value = getattr(config, name)
        if type(value) is not int or not 1 <= value <= high:
            raise ConfigError(f"{name} must be an integer between 1 and {high:,}, not {value!r}")
    for name in ("epochs", "batch_size"):
        value = getattr(config, name)
        if type(value) is not int or value < 1:
            raise ConfigError(f"{name} must be a positive integer, not {value!r}")
    if type(config.tune_top_k) is not int or config.tune_top_k < 0:
        raise ConfigError(f"tune_top_k must be a non-negative integer, not {config.tune_top_k!r}")
    if not 0 <= config.dropout < 1:
        raise ConfigError(f"dropout must be in [0, 1), not {config.dropout!r}")
    if not config.lr > 0:
        raise ConfigError(f"lr must be positive, not {config.lr!r}")
    if not config.train:
        raise ConfigError("no training set: give --train")
    if not config.dev:
        raise ConfigError("no dev set: the epoch kept is the one with the best dev F1; give --dev")


def _read_sets(sources: list[str], policy: str) -> list[dict]:
    from .data import read_squad

    examples = []
    for source in sources:
        squad = read_squad(source, misaligned=policy)
        if squad.misaligned:
            log.warning(squad.describe_misaligned())
        examples.extend(squad.examples)
    return examples


def drop_leaking(train: list[dict], evaluation_sources: list[str]) -> tuple[list[dict], int]:
    """The training examples minus those involved in a leak into the evaluation sets (qa/leakage.py), and how many
    were dropped."""
    from .data import read_squad
    from .leakage import find_leakage

    evaluation = [(source, read_squad(source, misaligned="keep").examples) for source in evaluation_sources]
    leaking = {train_id for leak in find_leakage([("train", train)], evaluation).leaks for train_id in leak.train_ids}
    kept = [e for e in train if e["id"] not in leaking]
    return kept, len(train) - len(kept)


def train_reader(config: ReaderConfig) -> dict[str, Any]:
    """Train, keep the epoch with the best dev F1, write the output directory; returns its metadata."""
    check_config(config)
    from ..embeddings import Embeddings

    output = Path(config.output_dir)
    inputs = [config.embeddings] + [s for s in config.train + config.dev if Path(s).exists()]
    claim_output_dir(output, READER_OUTPUT, inputs=inputs, overwrite=config.overwrite)
    # The reader is bound to the vectors read here: their checksums are taken from what was read, now, not from the
    # directory at the end of training, which someone may have retrained in place meanwhile.
    read_at = _files_state(Path(config.embeddings))
    embeddings = Embeddings.load(config.embeddings)
    bound = {"embeddings_words_sha256": embeddings.words_sha256,
             "embeddings_vectors_sha256": embeddings.vectors_sha256()}
    import torch

    from .align import QAPreprocessing

    torch.manual_seed(config.seed)
    rng = np.random.default_rng(config.seed)
    preprocessing = QAPreprocessing(embeddings.preprocessing)
    vocabulary = Vocabulary(embeddings.words)
    train_examples = _read_sets(config.train, "skip")
    dev_examples = _read_sets(config.dev, "keep")
    train_examples, dropped = drop_leaking(train_examples, config.hold_out)
    if dropped:
        log.warning("dropped %d training question(s) whose context or question also occurs in a held-out set", dropped)
    train, unaligned = encode_examples(train_examples, preprocessing, vocabulary)
    train = [e for e in train if e.gold is not None]
    if unaligned:
        log.warning("skipped %d training question(s) whose answer does not map to context words through %s "
                    "(ids: %s)", len(unaligned), embeddings.preprocessing, ", ".join(unaligned[:20]))
    if not train:
        raise InputError("no training question has an answer that maps to context words",
                         path=", ".join(config.train))
    dev, _ = encode_examples(dev_examples, preprocessing, vocabulary)
    tuned_rows = _most_frequent_question_words(train, config.tune_top_k)
    model = _build_model(embeddings.vectors, tuned_rows, config.hidden, config.layers, config.dropout)
    optimizer = torch.optim.Adamax([p for p in model.parameters() if p.requires_grad], lr=config.lr)
    covered = float(np.mean(np.concatenate([e.context_ids for e in train]) != UNK))
    log.info("train-reader: %d training questions (%d skipped), %d dev questions; %.1f%% of context words have a "
             "vector; %d question words fine-tuned", len(train), len(unaligned), len(dev), 100 * covered,
             len(tuned_rows))
    history, best, best_state = [], None, None
    started = time.perf_counter()
    for epoch in range(1, config.epochs + 1):
        model.train()
        order = rng.permutation(len(train))
        total = 0.0
        for first in range(0, len(order), config.batch_size):
            items = [train[i] for i in order[first: first + config.batch_size]]
            start, end = model(*_batch(items))
            gold = torch.tensor([e.gold for e in items])
            loss = (torch.nn.functional.cross_entropy(start, gold[:, 0])
                    + torch.nn.functional.cross_entropy(end, gold[:, 1]))
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
            optimizer.step()
            total += float(loss.detach()) * len(items)
        scores = _dev_scores(dev_examples, _predict(model, dev, config.max_span_words))
        history.append({"epoch": epoch, "train_loss": round(total / len(train), 4),
                        "dev_em": round(scores["em"], 2), "dev_f1": round(scores["f1"], 2)})
        if best is None or scores["f1"] > best["dev_f1"]:
            best = history[-1]
            best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        if config.progress:
            log.info("epoch %d/%d: loss %.3f, dev EM %.1f F1 %.1f (best F1 %.1f, epoch %d)", epoch, config.epochs,
                     history[-1]["train_loss"], scores["em"], scores["f1"], best["dev_f1"], best["epoch"])
    seconds = time.perf_counter() - started
    if _files_state(Path(config.embeddings)) != read_at:
        log.warning("%s changed while train-reader ran: the reader is bound to the vectors read at the start (their "
                    "checksums are recorded), which that directory may no longer hold; reader-predict and "
                    "tune-decoding refuse other vectors", config.embeddings)
    reader_config = {
        "hidden": config.hidden, "layers": config.layers, "dropout": config.dropout,
        "max_span_words": config.max_span_words, "dim": embeddings.dim,
        "embeddings": os.path.abspath(config.embeddings), "embeddings_words": len(embeddings), **bound,
        "tuned_words": [embeddings.words[r - 2] for r in tuned_rows],
    }
    from safetensors.torch import save_file

    with OutputLock(output, READER_OUTPUT.verb):
        claim_output_dir(output, READER_OUTPUT, inputs=inputs, overwrite=config.overwrite)
        remove_stale_temporaries(output.parent, f".{output.name}.*.tmp")
        with atomic_directory(output) as tmp:
            save_file({k: v.contiguous() for k, v in best_state.items()}, str(tmp / WEIGHTS_FILE))
            (tmp / CONFIG_FILE).write_text(json.dumps(reader_config, ensure_ascii=False, indent=2) + "\n",
                                           encoding="utf-8")
            write_metadata(
                tmp, task=TASK, preprocessing=embeddings.preprocessing, embeddings=portable_path(config.embeddings),
                train=[portable_path(s) if Path(s).exists() else s for s in config.train],
                dev=[portable_path(s) if Path(s).exists() else s for s in config.dev],
                train_questions=len(train), skipped_unaligned=len(unaligned), epochs=history, best_epoch=best["epoch"],
                best_dev_em=best["dev_em"], best_dev_f1=best["dev_f1"], lr=config.lr, batch_size=config.batch_size,
                seed=config.seed, train_seconds=round(seconds, 1), created_by=f"arabert-pipeline {__version__}",
            )
    return read_metadata(output)


def _files_state(directory: Path) -> list[tuple[int, int, int] | None]:
    """What tells a rewritten words.txt or vectors.npy (inode, size, modification time) without reading them."""
    state = []
    for name in ("words.txt", "vectors.npy"):
        try:
            info = os.stat(directory / name)
        except OSError:
            state.append(None)
        else:
            state.append((info.st_ino, info.st_size, info.st_mtime_ns))
    return state


def _most_frequent_question_words(train: list[Encoded], k: int) -> np.ndarray:
    if k == 0:
        return np.zeros(0, dtype=np.int64)
    ids = np.concatenate([e.question_ids for e in train])
    ids = ids[ids >= 2]  # UNK has no vector to start from, PAD is never read
    if ids.size == 0:
        return np.zeros(0, dtype=np.int64)
    rows, counts = np.unique(ids, return_counts=True)
    order = np.lexsort((rows, -counts))  # ties by row: the embeddings' own frequency order
    return rows[order[:k]]


# --------------------------------------------------------------------------------------------------------------------
# Loading and predicting


def read_reader_config(path: Path) -> dict[str, Any]:
    """reader_config.json, checked field by field (each wrong field a one-line error naming the file and field); the
    fields that need the embeddings (dim, tuned_words, the checksums' match) are checked by StaticReader.load."""
    config = read_json_file(path)

    def field(name: str) -> Any:
        if name not in config:
            raise ConfigError(f"{path}: {name} is missing")
        return config[name]

    for name, high in (*SIZE_LIMITS.items(), ("dim", 2**31), ("embeddings_words", 2**31)):
        value = field(name)
        if type(value) is not int or not 1 <= value <= high:
            raise ConfigError(f"{path}: {name} must be an integer between 1 and {high:,}, not {value!r}")
    dropout = field("dropout")
    if type(dropout) not in (int, float) or not (math.isfinite(dropout) and 0 <= dropout < 1):
        raise ConfigError(f"{path}: dropout must be a number in [0, 1), not {dropout!r}")
    if not isinstance(field("embeddings"), str) or not config["embeddings"]:
        raise ConfigError(f"{path}: embeddings must be a path, not {config['embeddings']!r}")
    # embeddings_vectors_sha256 is absent from readers written before it was recorded: their vectors go unchecked.
    for name in ("embeddings_words_sha256", "embeddings_vectors_sha256"):
        value = field(name) if name == "embeddings_words_sha256" else config.get(name)
        if value is not None and (not isinstance(value, str) or not _SHA256.fullmatch(value)):
            raise ConfigError(f"{path}: {name} must be a SHA-256 hex digest, not {value!r}")
    tuned = field("tuned_words")
    if not isinstance(tuned, list) or not all(isinstance(w, str) for w in tuned):
        raise ConfigError(f"{path}: tuned_words must be a list of words, not {tuned!r}"[:300])
    if len(set(tuned)) != len(tuned):
        raise ConfigError(f"{path}: tuned_words lists a word twice")
    return config


class StaticReader:
    """A trained reader with its embeddings and preprocessing."""

    def __init__(self, model, preprocessing, vocabulary: Vocabulary, max_span_words: int, *,
                 embeddings: Path | None = None, embeddings_words_sha256: str | None = None):
        self.model, self.preprocessing, self.vocabulary = model, preprocessing, vocabulary
        self.max_span_words = max_span_words
        # The embeddings directory read and the checksum of its words.txt, which the reader was trained on.
        self.embeddings, self.embeddings_words_sha256 = embeddings, embeddings_words_sha256

    @classmethod
    def load(cls, directory: str | os.PathLike, embeddings: str | os.PathLike | None = None) -> StaticReader:
        """`embeddings`: the vectors' directory when it moved since training (its words.txt must be the same)."""
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        from ..embeddings import Embeddings
        from .align import QAPreprocessing

        directory = Path(directory)
        metadata = read_metadata(directory)
        if metadata.get("task") != TASK:
            raise ConfigError(f"{directory}: not written by `arabert-pipeline train-reader` (task is "
                              f"{metadata.get('task')!r})")
        config = read_reader_config(directory / CONFIG_FILE)
        source = Path(embeddings if embeddings is not None else config["embeddings"])
        vectors = Embeddings.load(source)
        recorded_vectors = config.get("embeddings_vectors_sha256")
        if vectors.words_sha256 != config["embeddings_words_sha256"] or (
                recorded_vectors is not None and vectors.vectors_sha256() != recorded_vectors):
            raise ConfigError(f"{source} is not the embeddings directory {directory} was trained on (its words.txt "
                              "or vectors differ); pass the one it was trained on")
        if vectors.dim != config["dim"]:
            raise ConfigError(f"{directory / CONFIG_FILE}: dim is {config['dim']} but {source} has {vectors.dim}-"
                              "dimensional vectors")
        missing = next((w for w in config["tuned_words"] if w not in vectors.index), None)
        if missing is not None:
            raise ConfigError(f"{directory / CONFIG_FILE}: tuned_words: {missing!r} is not a word of {source}")
        tuned_rows = np.asarray([vectors.index[w] + 2 for w in config["tuned_words"]], dtype=np.int64)
        model = _build_model(vectors.vectors, tuned_rows, config["hidden"], config["layers"], config["dropout"])
        try:
            state = load_file(str(directory / WEIGHTS_FILE))
        except (SafetensorError, OSError) as exc:
            raise ConfigError(f"{directory / WEIGHTS_FILE}: unreadable weights ({exc})") from None
        try:
            model.load_state_dict(state)
        except RuntimeError as exc:
            raise ConfigError(f"{directory / WEIGHTS_FILE} does not fit {CONFIG_FILE} ({exc})") from None
        return cls(model, QAPreprocessing(vectors.preprocessing), Vocabulary(vectors.words), config["max_span_words"],
                   embeddings=source, embeddings_words_sha256=vectors.words_sha256)

    def predict(self, examples: list[dict]) -> dict[str, dict]:
        """{id: {"text", "start"}}: `text` is exactly `context[start:start + len(text)]`."""
        encoded, _ = encode_examples(examples, self.preprocessing, self.vocabulary)
        return _predict(self.model, encoded, self.max_span_words)


def predict_file(directory: str, data: list[str], output: str, *, embeddings: str | None = None,
                 overwrite: bool = False) -> int:
    from ..artifacts import claim_output_file
    from .data import resolve

    # Names resolved too: `--data xquad-ar -o $DATA/qa/xquad.ar.json --overwrite` must not replace the data it reads.
    claim_output_file(output, verb="reader-predict", inputs=[directory, *[resolve(d) for d in data]],
                      overwrite=overwrite)
    reader = StaticReader.load(directory, embeddings)
    answers = {}
    for source in data:
        examples = _read_sets([source], "keep")
        answers.update(reader.predict(examples))
        log.info("%s: %d questions answered", source, len(examples))
    with atomic_write(output) as f:
        json.dump(answers, f, ensure_ascii=False, indent=1)
        f.write("\n")
    return len(answers)
