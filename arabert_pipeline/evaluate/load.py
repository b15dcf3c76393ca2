"""Reading an `evaluate` run directory back: results.json and the per-question records (the notebook's input)."""
from __future__ import annotations

import gzip
import json
import os
import re
from pathlib import Path

from ..errors import ConfigError, InputError

RESULTS_DIR_ENV = "ARABERT_PIPELINE_EVAL_DIR"
RESULTS_FILE = "results.json"


def safe_name(name: str) -> str:
    """A label or dataset name as a file name of the report (per_question/, predictions/, plots/)."""
    return re.sub(r"[^\w.-]+", "_", name)


def check_file_names(names: list[str], what: str, remedy: str) -> None:
    """Names the report writes files under (system labels, data sets) must stay apart as file names: two that differ
    only in characters a file name cannot hold ("a/b", "a_b") would write one file, the second's over the first's."""
    files: dict[str, str] = {}
    for name in names:
        other = files.setdefault(safe_name(name), name)
        if other != name:
            raise ConfigError(f"the {what} {other!r} and {name!r} make the same file name {safe_name(name)!r} in the "
                              f"report: {remedy}")


def results_dir(path: str | os.PathLike | None = None, *, default: str | os.PathLike | None = None) -> Path:
    """An evaluation run directory: `path`, else $ARABERT_PIPELINE_EVAL_DIR, else `default` (the notebook passes
    its committed results, relative to the notebook; the package itself knows no results folder)."""
    chosen = path or os.environ.get(RESULTS_DIR_ENV) or default
    if not chosen:
        raise ConfigError(f"which evaluation run? Pass its directory or set ${RESULTS_DIR_ENV}")
    return Path(chosen)


def load_results(path: str | os.PathLike | None = None) -> dict:
    """results.json of an evaluation run directory (see `results_dir`)."""
    directory = results_dir(path)
    file = directory / RESULTS_FILE
    if not file.is_file():
        raise InputError(f"no {RESULTS_FILE}: not an `arabert-pipeline evaluate` output directory", path=directory)
    return json.loads(file.read_text(encoding="utf-8"))


def per_question_file(run: str | os.PathLike, dataset: str, label: str) -> Path:
    return Path(run) / "per_question" / safe_name(dataset) / f"{safe_name(label)}.jsonl.gz"


def no_answer_file(run: str | os.PathLike, dataset: str, label: str) -> Path:
    """Where a system's records of questions only no answer is right for are: those whose article the collection
    withheld (open_domain.py), and a --no-answer-data set's unanswerable questions (its key as `dataset`)."""
    return Path(run) / "no_answer" / safe_name(dataset) / f"{safe_name(label)}.jsonl.gz"


def load_no_answer(path: str | os.PathLike | None, dataset: str, label: str) -> list[dict]:
    """The records `no_answer_file` names (gzipped JSON lines)."""
    file = no_answer_file(results_dir(path), dataset, label)
    return [json.loads(line) for line in gzip.decompress(file.read_bytes()).decode("utf-8").splitlines() if line]


def load_per_question(path: str | os.PathLike | None, dataset: str, label: str) -> list[dict]:
    """The per-question records of one system on one dataset (gzipped JSON lines; plain .jsonl from older runs)."""
    file = per_question_file(results_dir(path), dataset, label)
    if file.is_file():
        text = gzip.decompress(file.read_bytes()).decode("utf-8")
    else:
        text = file.with_suffix("").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line]
