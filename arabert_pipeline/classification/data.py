"""Labelled texts for sequence classification: a user's CSV / TSV / JSON lines file with a text and a label column
(named by flags), or a registered set (ArSarcasm-v2 and the dev split carved from its training data).

    read_texts("my/train.csv", text_column="text", label_column="label")
    read_texts("arsarcasm-v2-train-rest", label_column="sentiment")     # the text column of a registered set is known

Every bad row is an InputError naming the file and the line (a missing column, a row of the wrong width, an empty
text, a JSON line that is not an object, a label outside `labels`), and so is a file without a single example.
Example ids: the JSON line's "id" when it has one, else the line number where the row starts.

ArSarcasm-v2 has no dev split. `arsarcasm-v2-dev` is 10% of its training tweets, stratified by the (sentiment,
sarcasm) pair and drawn with seed 0, so the same tweets are dev for both tasks; `arsarcasm-v2-train-rest` is the other
90%. Choose on the dev split; `arsarcasm-v2-test` is read once per shipped model.
"""
from __future__ import annotations

import csv
import dataclasses
import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..artifacts.paths import DATA_ROOT_ENV, data_root
from ..artifacts.reads import MAX_DATA_FILE_BYTES, check_input_file, json_line_id, json_lines
from ..errors import ConfigError, DataNotFoundError, InputError
from ..weights.files import read_text_file

FORMATS = ("csv", "tsv", "jsonl")
_SUFFIXES = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl"}


@dataclasses.dataclass(frozen=True)
class RegisteredTexts:
    relative: str  # under data_root()
    text_column: str
    license: str
    columns: tuple[str, ...]  # the label columns it has


@dataclasses.dataclass(frozen=True)
class StratifiedSplit:
    """Part of a registered set: `fraction` of each stratum (the values of `strata` columns) drawn with `seed`."""

    base: str
    part: str  # "dev" or "rest"
    strata: tuple[str, ...]
    fraction: float = 0.1
    seed: int = 0

    def rows(self, records: list[dict[str, str]]) -> list[int]:
        import numpy as np

        groups: dict[tuple, list[int]] = {}
        for index, record in enumerate(records):
            groups.setdefault(tuple(record[c] for c in self.strata), []).append(index)
        rng = np.random.default_rng(self.seed)
        dev: set[int] = set()
        for key in sorted(groups):
            members = groups[key]
            order = rng.permutation(len(members))
            dev.update(members[i] for i in order[: round(self.fraction * len(members))])
        return sorted(dev) if self.part == "dev" else [i for i in range(len(records)) if i not in dev]


_ARSARCASM = ("sarcasm", "sentiment", "dialect")
REGISTRY: dict[str, RegisteredTexts] = {
    "arsarcasm-v2-train": RegisteredTexts("tasks/arsarcasm-v2/training_data.csv", "tweet", "MIT", _ARSARCASM),
    "arsarcasm-v2-test": RegisteredTexts("tasks/arsarcasm-v2/testing_data.csv", "tweet", "MIT", _ARSARCASM),
}
SPLITS: dict[str, StratifiedSplit] = {
    "arsarcasm-v2-dev": StratifiedSplit("arsarcasm-v2-train", "dev", ("sentiment", "sarcasm")),
    "arsarcasm-v2-train-rest": StratifiedSplit("arsarcasm-v2-train", "rest", ("sentiment", "sarcasm")),
}


def dataset_names() -> list[str]:
    return [*REGISTRY, *SPLITS]


def dataset_license(name: str) -> str | None:
    entry = REGISTRY.get(SPLITS[name].base if name in SPLITS else name)
    return entry.license if entry else None


@dataclasses.dataclass
class LabelledTexts:
    """One set's examples {"id", "text", "label"}: what finetuning.sets.read_labelled_sets reads a set into."""

    name: str  # registry name, or the path as given
    path: Path
    examples: list[dict[str, Any]]
    text_column: str
    label_column: str
    misaligned: list = dataclasses.field(default_factory=list)  # every bad row is an error: nothing is skipped

    def describe_misaligned(self) -> str:
        return f"{self.name}: no row skipped"

    @property
    def labels(self) -> list[str]:
        return sorted({e["label"] for e in self.examples})


def resolve(source: str | Path) -> tuple[Path, RegisteredTexts | None, StratifiedSplit | None]:
    """A registered name or a local path → (an existing file, its registry entry, its split)."""
    name = str(source)
    split = SPLITS.get(name)
    entry = REGISTRY.get(split.base if split else name)
    if entry is None:
        path = Path(source).expanduser()
        if path.is_file():
            return path, None, None
        if path.exists():
            check_input_file(path, "labelled-text file")
        if path.suffix or "/" in name or "\\" in name:
            raise DataNotFoundError(f"{path}: no such file")
        raise ConfigError(f"unknown classification dataset {name!r}: use a file path (CSV, TSV, JSON lines) or one "
                          f"of {', '.join(dataset_names())}")
    target = data_root() / entry.relative
    if not target.is_file():
        raise DataNotFoundError(f"dataset {name!r} not found at {target}: point ${DATA_ROOT_ENV} at a folder holding "
                                f"{entry.relative}")
    return target, entry, split


def read_texts(source: str | Path, *, text_column: str | None = None, label_column: str = "label",
               labels: Sequence[str] | None = None, format: str | None = None) -> LabelledTexts:
    """The examples of one set (see the module docstring). `text_column`: default "text", or the registered set's.
    `labels`: the allowed labels (a row with another one is an error); None accepts any non-empty label."""
    path, entry, split = resolve(source)
    text_column = text_column or (entry.text_column if entry else "text")
    format = format or _format_of(path)
    text = read_text_file(path, max_bytes=MAX_DATA_FILE_BYTES, bom=True)
    records = list(_rows(text, path, format))
    if split is not None:
        keep = split.rows([r for _, r in records])
        records = [records[i] for i in keep]
    allowed = set(labels) if labels is not None else None
    examples: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    for line, record in records:
        for column in (text_column, label_column):
            if column not in record:
                have = ", ".join(k for k in record if not k.startswith("\0"))
                raise InputError(f"no column {column!r} (the row has {have or 'none'}); name the columns with "
                                 "--text-column / --label-column", path=path, line=line)
        value, label = record[text_column], record[label_column]
        if not isinstance(value, str) or not value.strip():
            raise InputError("empty text" if isinstance(value, str) else f"the text must be a string, got "
                             f"{type(value).__name__}", path=path, line=line, field=text_column)
        if isinstance(label, int) and not isinstance(label, bool):  # JSON lines may hold 0 / 1
            label = str(label)
        if not isinstance(label, str) or not label.strip():
            raise InputError("empty label" if isinstance(label, str) else f"the label must be a string or an "
                             f"integer, got {type(label).__name__}", path=path, line=line, field=label_column)
        label = label.strip()
        if allowed is not None and label not in allowed:
            raise InputError(f"unknown label {label!r} (labels: {', '.join(sorted(allowed))})", path=path, line=line,
                             field=label_column)
        example_id = str(json_line_id(record.get("\0id", line), path=path, line=line))
        if example_id in seen:
            raise InputError(f"duplicate id {example_id!r} (first on line {seen[example_id]})", path=path, line=line,
                             field="id")
        seen[example_id] = line
        examples.append({"id": example_id, "text": value, "label": label})
    if not examples:
        raise InputError("no examples in the file (it is empty or holds only a header)", path=path)
    return LabelledTexts(str(source), path, examples, text_column, label_column)


def _format_of(path: Path) -> str:
    found = _SUFFIXES.get(path.suffix.lower())
    if found is None:
        raise InputError(f"cannot tell the format from the name: pass --format ({', '.join(FORMATS)})", path=path)
    return found


def _rows(text: str, path: Path, format: str):
    """(line where the row starts, {column: value}) for every non-blank row; a JSON line's "id" is kept as "\\0id"."""
    if format not in FORMATS:
        raise ConfigError(f"format {format!r}: use one of {', '.join(FORMATS)}")
    if format == "jsonl":
        for number, record in json_lines(text, path=path):
            if not isinstance(record, dict):
                raise InputError(f"expected a JSON object, got {type(record).__name__}", path=path, line=number)
            if "id" in record:
                record["\0id"] = record.pop("id")
            yield number, record
        return
    # strict: a quote that opens a field must close where a field ends. Unstrict, a stray opening quote swallows
    # every row up to the next quote in the file into one field, and the rows after it still parse.
    delimiter = "," if format == "csv" else "\t"
    # The physical lines as csv reads them (\n, \r\n or \r ends), kept to look inside a record that spans several.
    lines = io.StringIO(text, newline="").readlines()
    reader = csv.reader(lines, delimiter=delimiter, strict=True)
    try:
        header = next(reader)
    except StopIteration:
        return
    except csv.Error as exc:
        raise _not_csv(exc, format, path, 1, reader.line_num) from None
    header = [h.strip() for h in header]
    for index, name in enumerate(header):
        if name and name in header[:index]:
            # a dict of the row would keep the last column of the name, silently
            raise InputError(f"the header names column {name!r} twice (columns {header.index(name) + 1} and "
                             f"{index + 1}); rename one", path=path, line=1, field=name)
    while True:
        start = reader.line_num + 1
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise _not_csv(exc, format, path, start, reader.line_num) from None
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != len(header):
            raise InputError(f"{len(row)} fields, but the header has {len(header)} ({', '.join(header)})", path=path,
                             line=start)
        _check_no_row_inside(lines, start, reader.line_num, len(header), delimiter, format, path)
        yield start, dict(zip(header, row, strict=True))


def _check_no_row_inside(lines: list[str], start: int, end: int, width: int, delimiter: str, format: str,
                         path: Path) -> None:
    """Refuse a record of lines start..end whose quoted field holds a line that is itself a whole row. Strict mode
    catches a stray quote only when it never closes where a field ends; one that closes right before a delimiter
    (`third row",pos`) makes one well-formed record of every row in between, silently. The lines strictly between
    the first and the last lie wholly inside the quoted field: rows swallowed by a stray quote read as rows of the
    header's width there, a line of a legitimate multi-line text rarely does (the first and last lines are not
    checked: a real field's closing line `end of text",POS` reads as a row too). With fewer than two columns every
    line would read as a row, so nothing can be told apart."""
    if end - start < 2 or width < 2:
        return
    for number in range(start + 1, end):
        try:
            fields = next(csv.reader([lines[number - 1]], delimiter=delimiter, strict=True), [])
        except csv.Error:
            continue  # not a row on its own: a piece of a quoted field
        if len(fields) == width:
            raise InputError(f"not {format.upper()}: a field opened with a quote in the row of line {start} runs on "
                             f"to line {end}, and line {number} inside it reads as a row of its own; a stray quote? "
                             "Quote such a field whole and double the quotes inside it", path=path, line=start)


def _not_csv(exc: csv.Error, format: str, path: Path, start: int, end: int) -> InputError:
    if end <= start:
        return InputError(f"not {format.upper()} ({exc})", path=path, line=start)
    return InputError(f"not {format.upper()} ({exc} on line {end}): a field opened with a quote in the row of line "
                      f"{start} runs on to line {end}; a stray quote? Quote such a field whole and double the quotes "
                      "inside it", path=path, line=start)
