"""Sentences tagged word by word: CoNLL-style files (`token<TAB>tag` a line, a blank line between sentences; CRLF line
ends and a `-DOCSTART-` line are accepted) and the registered ANERcorp split.

    read_conll("my/train.conll")                  # every line checked; a tag sequence that is not BIO is an error
    read_conll("my/train.conll", policy="repair")  # an I-X that does not continue an X entity is read as B-X
    read_conll("anercorp-train")                   # the AraBERT authors' cleaned ANERcorp, 80/10/10 (seed 42)

Tags are `O`, `B-TYPE` or `I-TYPE`. A bad line (not two tab-separated fields, an empty token, a tag of another shape),
a sequence that is not BIO (under policy "error") and a file without a sentence are InputErrors naming the file and
line. Policy "repair" (and "keep", what evaluation sets are read with) reads an I-X after O or after another type as
B-X, which is how seqeval and conlleval score such a tag: the sentences are kept and the repairs reported.

ANERcorp as the AraBERT authors cleaned it still holds 39 / 4 / 6 such tags (train / dev / test); it is always read
with the repair, and the count is reported with every run. Sentence ids are the line of their first token.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from ..artifacts.paths import DATA_ROOT_ENV, data_root
from ..artifacts.reads import MAX_DATA_FILE_BYTES, check_input_file
from ..errors import ConfigError, DataNotFoundError, InputError
from ..weights.files import read_text_file

POLICIES = ("error", "repair", "keep")
ANERCORP_LICENSE = "AraBERT licence (notice kept; derivatives under the same licence)"


@dataclasses.dataclass(frozen=True)
class RegisteredConll:
    relative: str
    license: str
    repair: bool  # read with the BIO repair whatever the policy (a known property of the published files)


REGISTRY: dict[str, RegisteredConll] = {
    f"anercorp-{split}": RegisteredConll(f"tasks/anercorp/ANERCorp_manually_cleaned_{split}.tsv", ANERCORP_LICENSE,
                                         True)
    for split in ("train", "dev", "test")
}


def dataset_names() -> list[str]:
    return list(REGISTRY)


def dataset_license(name: str) -> str | None:
    entry = REGISTRY.get(name)
    return entry.license if entry else None


@dataclasses.dataclass
class TaggedSentences:
    """One set's sentences {"id", "words", "tags"}: what finetuning.sets.read_labelled_sets reads a set into."""

    name: str
    path: Path
    examples: list[dict[str, Any]]
    misaligned: list[dict[str, Any]]  # the repaired tags: {"id", "line", "tag", "read_as"}
    policy: str

    def describe_misaligned(self) -> str:
        lines = ", ".join(str(m["line"]) for m in self.misaligned[:10])
        more = " …" if len(self.misaligned) > 10 else ""
        return (f"{self.name}: {len(self.misaligned)} tag(s) not BIO read as the start of an entity, as seqeval "
                f"reads them (lines {lines}{more})")

    @property
    def types(self) -> list[str]:
        return sorted({t[2:] for e in self.examples for t in e["tags"] if t != "O"})


def split_tag(tag: str) -> tuple[str, str]:
    """("B" | "I" | "O", type); a tag of another shape raises ValueError."""
    if tag == "O":
        return "O", ""
    if len(tag) > 2 and tag[0] in "BI" and tag[1] == "-" and tag[2:].strip() == tag[2:]:
        return tag[0], tag[2:]
    raise ValueError(tag)


def repair_bio(tags: list[str]) -> list[tuple[int, str]]:
    """Repair in place every I-X that does not continue an X entity into B-X; returns (index, original tag)."""
    fixed, previous = [], "O"
    for i, tag in enumerate(tags):
        prefix, kind = split_tag(tag)
        if prefix == "I" and previous[2:] != kind:
            fixed.append((i, tag))
            tags[i] = "B-" + kind
        previous = tags[i]
    return fixed


def resolve(source: str | Path) -> tuple[Path, RegisteredConll | None]:
    name = str(source)
    entry = REGISTRY.get(name)
    if entry is None:
        path = Path(source).expanduser()
        if path.is_file():
            return path, None
        if path.exists():
            check_input_file(path, "CoNLL file")
        if path.suffix or "/" in name or "\\" in name:
            raise DataNotFoundError(f"{path}: no such file")
        raise ConfigError(f"unknown NER dataset {name!r}: use a CoNLL file path or one of {', '.join(REGISTRY)}")
    target = data_root() / entry.relative
    if not target.is_file():
        raise DataNotFoundError(f"dataset {name!r} not found at {target}: point ${DATA_ROOT_ENV} at a folder holding "
                                f"{entry.relative}")
    return target, entry


def read_conll(source: str | Path, policy: str = "error") -> TaggedSentences:
    if policy not in POLICIES:
        raise ConfigError(f"policy {policy!r}: use one of {', '.join(POLICIES)}")
    path, entry = resolve(source)
    repair = policy != "error" or (entry is not None and entry.repair)
    text = read_text_file(path, max_bytes=MAX_DATA_FILE_BYTES, bom=True)
    examples, repaired = [], []
    words: list[str] = []
    tags: list[str] = []
    lines: list[int] = []

    def close() -> None:
        if not words:
            return
        sentence_id = str(lines[0])
        for i, tag in repair_bio(tags):
            if not repair:
                before = "O" if i == 0 else tags[i - 1]
                raise InputError(f"tag {tag} after {before}: not BIO (an entity starts with B-{tag[2:]}); pass "
                                 f"--repair-bio to read it as B-{tag[2:]}", path=path, line=lines[i])
            repaired.append({"id": sentence_id, "line": lines[i], "tag": tag, "read_as": tags[i]})
        examples.append({"id": sentence_id, "words": list(words), "tags": list(tags)})
        words.clear()
        tags.clear()
        lines.clear()

    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw.rstrip("\r")
        if not line.strip():
            close()
            continue
        if _is_docstart(line):
            continue
        fields = line.split("\t")
        if len(fields) != 2:
            raise InputError(f"expected token<TAB>tag, got {len(fields)} tab-separated field(s)", path=path,
                             line=number)
        word, tag = fields[0].strip(), fields[1].strip()
        if not word:
            raise InputError("empty token", path=path, line=number)
        if any(c.isspace() for c in word):
            raise InputError(f"token {word!r} holds a space", path=path, line=number)
        try:
            split_tag(tag)
        except ValueError:
            raise InputError(f"tag {tag!r}: expected O, B-TYPE or I-TYPE", path=path, line=number) from None
        words.append(word)
        tags.append(tag)
        lines.append(number)
    close()
    if not examples:
        raise InputError("no sentences in the file (it is empty)", path=path)
    return TaggedSentences(str(source), path, examples, repaired, policy)


def _is_docstart(line: str) -> bool:
    """A document marker: `-DOCSTART-` alone as the token, with no tag or O (CoNLL-2003's `-DOCSTART- -X- -X- O`).
    A token that only starts so (`-DOCSTART-x`), or one tagged as an entity, is a word of the sentence."""
    fields = line.split()
    return bool(fields) and fields[0] == "-DOCSTART-" and (len(fields) == 1 or fields[-1] == "O")
