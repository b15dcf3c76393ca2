"""`arabert-pipeline weights`: a model dir's weights written in another storage (weights/).

    arabert-pipeline weights arabert-mini --plain OUT    # OUT: a plain fp32 transformers checkpoint of the model
    arabert-pipeline weights runs/qa --int8-rows         # runs/qa/model.safetensors rewritten in int8 rows

`--plain OUT` is what transformers loads without this package (`AutoModel...from_pretrained(OUT)`), and what
`export-onnx --standalone` needs from an int8-row model dir. OUT is a new directory (or an empty one): built beside it
under a temporary name and renamed into place once complete, under a lock (outputs.OutputLock), so a failed or killed
run leaves no OUT and a rerun is not refused; an existing OUT is never written into. `--int8-rows` replaces
MODEL_DIR/model.safetensors, the one file it was asked to rewrite, atomically and under a lock; a model.onnx beside
it reads the old layout and must be exported again. Files follow the umask, weights included.

Here, in the layer above outputs.py, because weights/ (the storage, read by every loader) lies below it.
"""
from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from ..artifacts.models import shipped_model_dir
from ..artifacts.reads import check_input_file
from ..artifacts.writes import atomic_directory, follow_umask, naming_io_errors
from ..errors import ConfigError
from ..outputs import OutputLock, check_not_input, remove_stale_temporaries
from ..weights.header import storage_of
from ..weights.loading import write_plain
from ..weights.rows import compact
from .export import ONNX_FILE, WEIGHTS_FILE

VERB = "weights"


def register(subparsers) -> None:
    p = subparsers.add_parser(
        VERB, help="write a model dir's weights as a plain transformers checkpoint (--plain OUT) or in int8 rows",
        description="--plain OUT: write OUT, a plain fp32 transformers checkpoint of MODEL_DIR (model.safetensors, "
        "config and tokenizer files), which AutoModel...from_pretrained(OUT) loads without this package; OUT must be "
        "new or empty. --int8-rows: rewrite MODEL_DIR/model.safetensors with its large 2-D weights in int8 rows "
        "(one float32 scale per row; this package widens them to fp32 at load), then export model.onnx again.")
    p.add_argument("model_dir", metavar="MODEL_DIR", help="a model dir holding model.safetensors, or a shipped model's "
                                                          "name (arabert, arabert-mini)")
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--plain", metavar="OUT", help="the new directory to write the plain checkpoint to")
    mode.add_argument("--int8-rows", action="store_true", help="rewrite MODEL_DIR/model.safetensors in int8 rows")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    model_dir = shipped_model_dir(args.model_dir) or Path(args.model_dir)
    if args.plain:
        out = plain_copy(model_dir, args.plain)
        print(f"wrote {out}: a plain fp32 transformers checkpoint of {model_dir}")
        return 0
    counts = int8_rows_in_place(model_dir)
    stale = (model_dir / ONNX_FILE).is_file()
    print(f"{model_dir / WEIGHTS_FILE}: {counts['quantized']} tensors in int8 rows, {counts['kept']} kept"
          + (f"; its model.onnx reads the old layout: arabert-pipeline export-onnx {model_dir}" if stale else ""))
    return 0


def weights_file(model_dir: Path) -> Path:
    """MODEL_DIR/model.safetensors, a regular file; anything else is a one-line error naming what is missing."""
    if not model_dir.is_dir():
        raise ConfigError(f"{model_dir}: no such model directory")
    path = model_dir / WEIGHTS_FILE
    if not path.exists() and not path.is_symlink():
        inside = " (its weights are inside its model.onnx, quantized: `export-onnx --standalone` wrote it, and it " \
                 "has no transformers checkpoint)" if (model_dir / ONNX_FILE).is_file() else ""
        raise ConfigError(f"{model_dir} has no {WEIGHTS_FILE}{inside}")
    check_input_file(path, "weights file")
    return path


@contextlib.contextmanager
def readable(path: Path) -> Iterator[None]:
    """A file the safetensors library refuses (its data shorter than its header says) named as the header reader
    names one."""
    from safetensors import SafetensorError

    try:
        yield
    except SafetensorError as exc:
        raise ConfigError(f"{path}: not a readable safetensors file ({' '.join(str(exc).split())})") from None


def plain_copy(model_dir: Path, out: str | os.PathLike) -> Path:
    """OUT, a new directory: weights.loading.write_plain of MODEL_DIR, built under a temporary name beside OUT and
    renamed into place once complete, under OUT's lock."""
    source, out = weights_file(model_dir), Path(out)
    check_not_input(out, [model_dir], "--plain", within=True)
    with OutputLock(out, f"{VERB} --plain"):
        if out.is_symlink() or (out.exists() and not (out.is_dir() and not any(out.iterdir()))):
            raise ConfigError(f"--plain {out} exists: choose a new directory (an existing one is never written into "
                              "or replaced)")
        remove_stale_temporaries(out.parent, f".{out.name}.*.tmp")  # a killed run's, under the lock
        with atomic_directory(out) as staged, readable(source):
            write_plain(model_dir, staged)
    return out


def check_not_compact(weights: Path) -> None:
    if storage_of(weights) is not None:
        raise ConfigError(f"{weights} is already stored in int8 rows")


def int8_rows_in_place(model_dir: Path) -> dict[str, int]:
    """MODEL_DIR/model.safetensors rewritten by weights.rows.compact: written beside it under a temporary name and
    renamed over it once complete, under its lock; {"quantized": n, "kept": m}."""
    weights = weights_file(model_dir)
    if weights.is_symlink():
        raise ConfigError(f"{weights} is a symbolic link: rewriting it in place would replace the link, not the file "
                          "it names; compact a copy of the model dir (cp -rL)")
    temporary = weights.with_name(f".{weights.name}.int8.tmp")
    check_not_compact(weights)  # before the lock, which a read-only model dir would refuse first
    with OutputLock(weights, f"{VERB} --int8-rows"):
        check_not_compact(weights)  # another run may have compacted it meanwhile
        remove_stale_temporaries(model_dir, temporary.name)  # a killed run's, under the lock
        try:
            with naming_io_errors(weights), readable(weights):
                counts = compact(weights, temporary)
            follow_umask(temporary)
            os.replace(temporary, weights)
        finally:
            temporary.unlink(missing_ok=True)
    return counts
