"""Training the static reader on the package's one engine (DrQA's `train.py`): `arabert-pipeline train-reader`.

    train_reader(ReaderConfig(embeddings="runs/ft", train=["arcd-train"], dev=["arcd-dev"], output_dir="runs/rd"))

The sets are read and guarded as finetune reads them (qa.data.read_squad_sets: the training questions that leak
into a dev or held-out set dropped, training answers whose answer_start is wrong skipped), and answers mapped to
words (features.py). `ReaderTrainer` is a finetuning.FinetuneEngine: DrQA's Adamax at a constant rate, gradients
clipped at norm 10, the questions shuffled each epoch with the seed, and at each epoch's end the dev score on the
transformer's dev metric (qa/metrics.py DEV_METRIC); the best epoch is kept. The engine writes OUT/log.jsonl (the
loss every LOG_EVERY steps) beside the reader's files (predict.py).
"""
from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from ...artifacts.metadata import METADATA_FILE, read_metadata, write_metadata
from ...artifacts.paths import portable_path
from ...errors import ConfigError, InputError
from ...finetuning.selection import FinetuneEngine
from ...outputs import OutputKind
from ...training import CHECKPOINTS, LOG_FILE, LoopSettings
from ...version import __version__
from ..align import QAPreprocessing
from ..data import read_squad_sets
from ..metrics import DEV_METRIC, SCORE_KEYS, score_question
from .config import CONFIG_FILE, TASK, WEIGHTS_FILE, ReaderConfig, check_config
from .features import UNK, Vocabulary, batch, encode_examples, most_frequent_question_words
from .predict import answer

log = logging.getLogger(__name__)
READER_OUTPUT = OutputKind("train-reader", names=(WEIGHTS_FILE, CONFIG_FILE, METADATA_FILE, CHECKPOINTS, LOG_FILE,
                                                  "tensorboard"),
                           markers=(WEIGHTS_FILE, CHECKPOINTS, LOG_FILE), metadata_marker=("task", TASK))
MAX_GRAD_NORM = 10.0  # DrQA's clipping
LOG_EVERY = 10  # optimizer steps per log.jsonl row


def train_reader(config: ReaderConfig) -> dict[str, Any]:
    """Train, keep the epoch with the best dev score, write the output directory; returns its metadata."""
    trainer = ReaderTrainer(config)
    trainer.train()
    shutil.rmtree(trainer.output / CHECKPOINTS, ignore_errors=True)
    return read_metadata(trainer.output)


class ReaderTrainer(FinetuneEngine):
    """The static reader on the training engine: ReaderTrainer(config) reads the vectors and the sets, encodes the
    questions and builds the network (every check before training), then train()."""

    output_kind = READER_OUTPUT
    description = "train-reader"
    dev_metric = DEV_METRIC
    unit = "training questions"

    def __init__(self, config: ReaderConfig):
        check_config(config)
        self.config, self.say_to = config, log.info
        self.epochs = config.epochs
        self.epoch_rows: list[dict[str, Any]] = []
        super().__init__(LoopSettings(
            output=config.output_dir, lr=config.lr, warmup=0, seed=config.seed, weight_decay=0.0, bf16="off",
            max_grad_norm=MAX_GRAD_NORM, log_every=LOG_EVERY, keep_checkpoints=1, overwrite=config.overwrite,
            progress=config.progress, schedule="constant"))

    def inputs(self) -> list[str]:
        config = self.config
        return [config.embeddings, *([config.init_from] if config.init_from else [])] + [
            s for s in config.train + config.dev if Path(s).exists()]

    def setup(self) -> None:
        import torch

        from ...embeddings import Embeddings
        from .model import Reader

        config = self.config
        # The reader is bound to the vectors read here: their checksums are taken from what was read, now, not from
        # the directory at the end of training, which someone may have retrained in place meanwhile.
        self.read_at = files_state(Path(config.embeddings))
        embeddings = Embeddings.load(config.embeddings)
        self.embeddings = embeddings
        self.bound = {"embeddings_words_sha256": embeddings.words_sha256,
                      "embeddings_vectors_sha256": embeddings.vectors_sha256()}
        torch.manual_seed(config.seed)
        preprocessor = QAPreprocessing(embeddings.preprocessing)
        vocabulary = Vocabulary(embeddings.words)
        self.sets = read_squad_sets(train=config.train, dev=config.dev, hold_out=config.hold_out, misaligned="skip",
                                    policy="drop", say=self.say)
        train, self.unaligned = encode_examples(self.sets.examples, preprocessor, vocabulary)
        self.train_items = [e for e in train if e.gold is not None]
        if self.unaligned:
            log.warning("skipped %d training question(s) whose answer does not map to context words through %s "
                        "(ids: %s)", len(self.unaligned), embeddings.preprocessing, ", ".join(self.unaligned[:20]))
        if not self.train_items:
            raise InputError("no training question has an answer that maps to context words",
                             path=", ".join(config.train))
        self.dev_examples = [e for f in self.sets.dev for e in f.examples]
        self.dev_items, _ = encode_examples(self.dev_examples, preprocessor, vocabulary)
        if config.init_from is None:
            self.tuned_rows = most_frequent_question_words(self.train_items, config.tune_top_k)
            model = Reader(embeddings.vectors, self.tuned_rows, config.hidden, config.layers, config.dropout)
        else:
            model = self.initial_reader(Path(config.init_from))
        optimizer = torch.optim.Adamax([p for p in model.parameters() if p.requires_grad], lr=config.lr)
        self.data_key = data_key(self.train_items, self.bound)
        covered = float(np.mean(np.concatenate([e.context_ids for e in self.train_items]) != UNK))
        self.say(f"train-reader: {len(self.train_items)} training questions ({len(self.unaligned)} skipped), "
                 f"{len(self.dev_items)} dev questions; {100 * covered:.1f}% of context words have a vector; "
                 f"{len(self.tuned_rows)} question words fine-tuned")
        checkpoint = self.find_checkpoint()
        self.prepare(model, optimizer, checkpoint)
        self.model.train()
        self.plan_schedule(checkpoint, 0, len(self.train_items), config.batch_size)

    def initial_reader(self, source: Path):
        """The --init-from reader's network, checked against these vectors and sizes; its fine-tuned question words
        stay the fine-tuned ones (their vectors have learnt what the questions ask)."""
        from .model import Reader
        from .predict import StaticReader, read_reader_config

        config = self.config
        if not (source / WEIGHTS_FILE).is_file():
            raise ConfigError(f"--init-from {source}: not a train-reader output (no {WEIGHTS_FILE})")
        stored = read_reader_config(source / CONFIG_FILE)
        for name in ("hidden", "layers"):
            if stored[name] != getattr(config, name):
                raise ConfigError(f"--init-from {source}: its {name} is {stored[name]}, not the "
                                  f"{getattr(config, name)} asked for here (give --{name} {stored[name]})")
        start = StaticReader.load(source, embeddings=config.embeddings)  # refuses other vectors
        self.tuned_rows = np.asarray([start.vocabulary.index[w] for w in stored["tuned_words"]], dtype=np.int64)
        model = Reader(self.embeddings.vectors, self.tuned_rows, config.hidden, config.layers, config.dropout)
        model.load_state_dict(start.model.state_dict())
        self.say(f"train-reader: starting from {source} ({len(self.tuned_rows)} fine-tuned question words)")
        return model

    # ------------------------------------------------------------------------------------------- the engine's hooks

    def epoch_plan(self, epoch: int) -> list[np.ndarray]:
        """Every training question once, shuffled: the epoch's permutation is the (epoch + 1)-th draw of a generator
        seeded with the seed, so that the order is a function of (seed, epoch) and the epochs differ."""
        rng = np.random.default_rng(self.config.seed)
        for _ in range(epoch + 1):
            order = rng.permutation(len(self.train_items))
        size = self.config.batch_size
        return [order[first: first + size] for first in range(0, len(order), size)]

    def make_batch(self, rows: np.ndarray, epoch: int, index: int):
        import torch

        items = [self.train_items[i] for i in rows]
        context, features, question = batch(items)
        return {"context": context, "features": features, "question": question,
                "gold": torch.tensor([e.gold for e in items])}

    def count_tokens(self, rows: np.ndarray) -> int:
        return int(sum(len(self.train_items[i].context_ids) + len(self.train_items[i].question_ids) for i in rows))

    def forward(self, batch):
        from torch.nn.functional import cross_entropy

        start, end = self.model(batch["context"], batch["features"], batch["question"])
        return {"loss": cross_entropy(start, batch["gold"][:, 0]) + cross_entropy(end, batch["gold"][:, 1])}

    def config_record(self) -> dict[str, Any]:
        skip = {"output_dir", "overwrite", "progress"}
        return {k: v for k, v in vars(self.config).items() if k not in skip}

    def config_differences(self, stored: dict[str, Any]) -> list[str]:
        current = self.config_record()
        return sorted(k for k in current.keys() | stored.keys() if stored.get(k) != current.get(k))

    def has_dev(self) -> bool:
        return True  # check_config insists on dev sets

    def dev_score(self) -> float:
        answers = answer(self.unwrapped(), self.dev_items, self.config.max_span_words)
        scores = [score_question(e, answers[e["id"]]["text"], answers[e["id"]]["start"]) for e in self.dev_examples
                  if e["answers"]["text"]]
        mean = {key: 100 * float(np.mean([s[key] for s in scores])) for key in SCORE_KEYS}
        # dev_em / dev_f1: the Arabic-normalized scores this reader has always reported beside the dev metric.
        self.epoch_rows.append({"epoch": len(self.epoch_rows) + 1, "train_loss": round(self.losses[-1], 4),
                                f"dev_{DEV_METRIC}": round(mean[DEV_METRIC], 2),
                                "dev_em": round(mean["arabic_em"], 2), "dev_f1": round(mean["arabic_f1"], 2)})
        return mean[DEV_METRIC]

    def finish(self, board) -> None:
        """The best epoch's weights, and the metadata of the output."""
        if not self.is_main:
            return
        chosen = self.keep_best_epoch()
        if files_state(Path(self.config.embeddings)) != self.read_at:
            log.warning("%s changed while train-reader ran: the reader is bound to the vectors read at the start "
                        "(their checksums are recorded), which that directory may no longer hold; reader-predict and "
                        "tune-decoding refuse other vectors", self.config.embeddings)
        self.chosen = self.epoch_rows[chosen["epoch"] - 1]

    def export_checkpoint(self, directory: Path) -> None:
        """A checkpoint's reader: its weights and architecture (the metadata comes with the finished reader)."""
        from safetensors.torch import save_file

        directory.mkdir(parents=True, exist_ok=True)
        save_file({k: v.contiguous() for k, v in self.unwrapped().state_dict().items()}, str(directory / WEIGHTS_FILE))
        (directory / CONFIG_FILE).write_text(json.dumps(self.reader_config(), ensure_ascii=False, indent=2) + "\n",
                                             encoding="utf-8")

    def export(self, directory: Path) -> None:
        config, best = self.config, self.chosen
        self.export_checkpoint(directory)
        def portable(sources: list[str]) -> list[str]:
            return [portable_path(s) if Path(s).exists() else s for s in sources]

        write_metadata(
            directory, task=TASK, preprocessing=self.embeddings.preprocessing,
            embeddings=portable_path(config.embeddings), train=portable(config.train), dev=portable(config.dev),
            hold_out=portable(config.hold_out),
            train_questions=len(self.train_items), skipped_unaligned=len(self.unaligned),
            dropped_for_leakage=sum(self.sets.dropped.values()), epochs=self.epoch_rows, dev_metric=DEV_METRIC,
            best_epoch=best["epoch"], **{f"best_dev_{DEV_METRIC}": best[f"dev_{DEV_METRIC}"]},
            best_dev_em=best["dev_em"], best_dev_f1=best["dev_f1"],
            init_from=portable_path(config.init_from) if config.init_from else None,
            lr=config.lr, batch_size=config.batch_size, seed=config.seed,
            train_seconds=round(self.state.elapsed, 1), created_by=f"arabert-pipeline {__version__}",
        )

    def reader_config(self) -> dict[str, Any]:
        config, embeddings = self.config, self.embeddings
        return {"hidden": config.hidden, "layers": config.layers, "dropout": config.dropout,
                "max_span_words": config.max_span_words, "dim": embeddings.dim,
                "embeddings": os.path.abspath(config.embeddings), "embeddings_words": len(embeddings), **self.bound,
                "tuned_words": [embeddings.words[r - 2] for r in self.tuned_rows]}


def data_key(items, bound: dict[str, str | None]) -> str:
    """A hash of what the reader trains on (word ids, features, gold spans) and of the vectors: a checkpoint of other
    data or vectors is refused."""
    import hashlib

    digest = hashlib.sha256(json.dumps(bound, sort_keys=True).encode())
    for e in items:
        digest.update(e.context_ids.tobytes() + e.question_ids.tobytes() + e.features.tobytes()
                      + np.asarray(e.gold, dtype=np.int64).tobytes())
    return digest.hexdigest()


def files_state(directory: Path) -> list[tuple[int, int, int] | None]:
    """What tells a rewritten words.txt or vectors.npy (inode, size, modification time) without reading them."""
    state: list[tuple[int, int, int] | None] = []
    for name in ("words.txt", "vectors.npy"):
        try:
            info = os.stat(directory / name)
        except OSError:
            state.append(None)
        else:
            state.append((info.st_ino, info.st_size, info.st_mtime_ns))
    return state
