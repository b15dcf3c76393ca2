"""The metadata stored beside each artifact: `arabert_pipeline.json` in every tokenizer and model directory, and a
corpus file's sidecar."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ..errors import ConfigError, InputError
from .reads import read_json_file
from .writes import atomic_write

METADATA_FILE = "arabert_pipeline.json"
# A corpus file's metadata lives beside it: corpus.txt.xz → corpus.txt.xz.arabert_pipeline.json (written by preprocess,
# read by train-tokenizer and pretrain to know how the text was preprocessed).
SIDECAR_SUFFIX = "." + METADATA_FILE


def sidecar_path(corpus: str | os.PathLike[str]) -> Path:
    return Path(f"{corpus}{SIDECAR_SUFFIX}")


def sidecar_preprocessing(corpus: str | os.PathLike[str]) -> str | None:
    """The preprocessing recorded in a corpus file's sidecar, or None if it has none."""
    sidecar = sidecar_path(corpus)
    if not sidecar.exists():
        return None
    name = read_json_file(sidecar).get("preprocessing")
    if not isinstance(name, str):
        raise InputError("no preprocessing name", path=sidecar, field="preprocessing")
    return name


def write_metadata(directory: str | os.PathLike[str], **fields: Any) -> None:
    """Merge `fields` into the directory's metadata file (created if missing)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    current = read_metadata(directory, missing_ok=True)
    current.update(fields)
    with atomic_write(directory / METADATA_FILE) as f:
        json.dump(current, f, ensure_ascii=False, indent=2, sort_keys=True)
        f.write("\n")


def read_metadata(directory: str | os.PathLike[str], *, missing_ok: bool = False) -> dict[str, Any]:
    path = Path(directory) / METADATA_FILE
    if not os.path.lexists(path):
        if missing_ok:
            return {}
        raise ConfigError(
            f"{path} not found: {directory} was not produced by arabert-pipeline, so its preprocessing is unknown. "
            "Pass the preprocessing name explicitly."
        )
    try:
        return read_json_file(path)
    except InputError as exc:
        raise ConfigError(str(exc)) from exc
