"""What a fine-tuned model dir records about itself, read the same way by fine-tuning, both answering backends and
every task: its arabert_pipeline.json (from a local directory or a hub repo) and the preprocessing it was trained with,
checked against the one a caller passes."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..artifacts.metadata import METADATA_FILE, read_metadata
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


def head_labels(metadata: dict[str, Any], config: dict[str, Any], source: object, what: str = "class") -> list[str]:
    """A task model's `what` names (classes, tags) in the head's order: the metadata's "labels", else config.json's
    id2label; each a non-empty string, none twice (two outputs of one name: one could never be answered)."""
    labels = metadata.get("labels")
    if labels is None and isinstance(config.get("id2label"), dict):
        id2label = config["id2label"]
        labels = [id2label.get(str(i), id2label.get(i)) for i in range(len(id2label))]
    if not isinstance(labels, list) or not labels or not all(isinstance(label, str) and label for label in labels):
        raise ConfigError(f"{source}: no {what} names (arabert_pipeline.json 'labels' or config.json id2label)")
    twice = sorted({label for label in labels if labels.count(label) > 1})
    if twice:
        raise ConfigError(f"{source}: arabert_pipeline.json 'labels' names {', '.join(map(repr, twice))} twice")
    return labels


def check_head_size(labels: list[str], outputs: object, config: dict[str, Any], source: object,
                    what: str = "class") -> None:
    """The names must be as many as the head's outputs (`outputs`: None where the graph does not say, and then
    config.json's id2label counts them): fewer, and an answer indexes past them; more, and some are never answered."""
    if type(outputs) is not int and isinstance(config.get("id2label"), dict):
        outputs = len(config["id2label"])
    if type(outputs) is int and outputs != len(labels):
        raise ConfigError(f"{source}: {len(labels)} {what} names in arabert_pipeline.json 'labels' for a head of "
                          f"{outputs} outputs")


def task_max_seq_length(metadata: dict[str, Any], config: dict[str, Any], source: object, default: int) -> int:
    """The recorded max_seq_length, between 1 and the model's position embeddings: 0 would cut every text to its
    special tokens, and past the positions the encoder fails (or, without a table, runs one text of any length)."""
    positions = config.get("max_position_embeddings")
    high = positions if type(positions) is int and positions > 0 else MAX_TASK_TOKENS
    if "max_seq_length" not in metadata:  # a model without our metadata: the default, within its positions
        return min(default, high)
    value = metadata["max_seq_length"]
    if type(value) is not int or not 1 <= value <= high:
        raise ConfigError(f"{source}: arabert_pipeline.json max_seq_length must be an integer between 1 and {high} "
                          f"(max_position_embeddings in config.json), not {value!r}")
    return value


# The longest window a task model without a position table (relative positions) may record: QA's bound.
MAX_TASK_TOKENS = 8192
