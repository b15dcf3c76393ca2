"""What a fine-tuned model dir records about itself, read the same way by fine-tuning, both answering backends and
every task: its arabert_pipeline.json (from a local directory or a hub repo) and the preprocessing it was trained with,
checked against the one a caller passes."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..artifacts import METADATA_FILE, read_metadata
from ..errors import ConfigError


def model_metadata(path_or_hub_id: str | os.PathLike) -> dict[str, Any]:
    """A model dir's arabert_pipeline.json, or a hub repo's; {} where there is none (or the hub cannot be reached)."""
    if Path(path_or_hub_id).is_dir():
        return read_metadata(path_or_hub_id, missing_ok=True)
    try:
        from huggingface_hub import hf_hub_download

        downloaded = Path(hf_hub_download(str(path_or_hub_id), METADATA_FILE))
    except Exception:  # offline, no such repo, or a hub model without our metadata: the caller must say
        return {}
    return read_metadata(downloaded.parent)


def recorded_preprocessing(source: object, metadata: dict[str, Any], given: str | None, *,
                           how: str = "pass it explicitly (e.g. preprocessing='arabertv02', or 'none' for models "
                                      "trained on raw text)") -> str:
    """The preprocessing a model was trained with: the one its metadata records, which `given` (when not None) must
    equal; `given` alone for a model without one. `how`: what the error for a model recording none tells the user
    to do (a flag on the command line, an argument in Python)."""
    from ..preprocess.preprocessor import preprocessing_name

    stored = metadata.get("preprocessing")
    if given is not None:  # an AraBERT model name stands for its preprocessing; an unknown name is refused as such
        given = preprocessing_name(given)
    if stored and given and stored != given:
        raise ConfigError(f"{source} was trained with preprocessing {stored!r}, not {given!r}")
    name = given or stored
    if not name:
        raise ConfigError(f"{source} has no {METADATA_FILE} recording its preprocessing: {how}")
    return name
