"""Contracts shared by every stage: the data root, the metadata stored beside each artifact, atomic writes.

Every tokenizer and model directory carries `arabert_pipeline.json` recording the preprocessing it was trained
with; downstream stages read it from there instead of guessing it from a model name.
"""
from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterator

from .errors import ConfigError, DataNotFoundError, InputError

METADATA_FILE = "arabert_pipeline.json"
DATA_ROOT_ENV = "ARABERT_PIPELINE_DATA"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def data_root() -> Path:
    """Where registered datasets live: `$ARABERT_PIPELINE_DATA`, else `~/.cache/arabert_pipeline/data`."""
    env = os.environ.get(DATA_ROOT_ENV)
    if env:
        return Path(env).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "arabert_pipeline" / "data"


def data_file(relative: str) -> Path:
    """A file under the data root, or a clear error saying where it was expected."""
    path = data_root() / relative
    if not path.exists():
        raise DataNotFoundError(
            f"{path} not found. Put the file there, or point ${DATA_ROOT_ENV} at a folder that holds {relative}."
        )
    return path


def write_metadata(directory: str | os.PathLike, **fields: Any) -> None:
    """Merge `fields` into the directory's metadata file (created if missing)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    current = read_metadata(directory, missing_ok=True)
    current.update(fields)
    with atomic_write(directory / METADATA_FILE) as f:
        json.dump(current, f, ensure_ascii=False, indent=2, sort_keys=True)
        f.write("\n")


def read_metadata(directory: str | os.PathLike, *, missing_ok: bool = False) -> dict[str, Any]:
    path = Path(directory) / METADATA_FILE
    if not path.exists():
        if missing_ok:
            return {}
        raise ConfigError(
            f"{path} not found: {directory} was not produced by arabert-pipeline, so its preprocessing is unknown. "
            "Pass the preprocessing name explicitly."
        )
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: invalid JSON ({exc})") from exc


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[Any]:
    """Write to a temporary file beside `path` and rename it into place only if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes it private; the result should look like any written file
    try:
        with os.fdopen(fd, mode, encoding=None if "b" in mode else encoding) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def atomic_directory(path: str | os.PathLike) -> Iterator[Path]:
    """Build a directory under a temporary name and move it into place only if the block succeeds.

    An existing directory at `path` is replaced only once the new one is complete.
    """
    import shutil

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"))
    os.chmod(tmp, 0o777 & ~_umask())
    try:
        yield tmp
        if path.exists():
            old = path.with_name(f".{path.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def load_tensor_state(path: str | os.PathLike) -> Any:
    """A training state saved with torch.save, read without unpickling arbitrary objects.

    Checkpoints are user paths: a pickle can run code on load, so only tensors and plain containers are accepted.
    """
    import pickle

    import torch

    path = Path(path)
    if not path.is_file():
        raise InputError("checkpoint state not found", path=path)
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise InputError(f"not a plain tensor checkpoint, refused (it would need to unpickle objects): {exc}",
                         path=path) from exc
    except (RuntimeError, EOFError, OSError, ValueError) as exc:
        raise InputError(f"unreadable checkpoint state ({type(exc).__name__}: {exc})", path=path) from exc


def read_json_file(path: str | os.PathLike, kind: type = dict) -> Any:
    """A JSON file that must hold a `kind` (object by default); any problem is an InputError naming the file."""
    path = Path(path)
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise InputError("not found", path=path) from exc
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 ({exc})", path=path) from exc
    except json.JSONDecodeError as exc:
        raise InputError(f"invalid JSON ({exc})", path=path) from exc
    except OSError as exc:
        raise InputError(f"unreadable ({exc.strerror or exc})", path=path) from exc
    if not isinstance(value, kind):
        raise InputError(f"expected a JSON {'object' if kind is dict else kind.__name__}, "
                         f"found {type(value).__name__}", path=path)
    return value
