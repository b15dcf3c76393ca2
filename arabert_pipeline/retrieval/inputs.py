"""The documents of the files `arabert-pipeline index` reads, by their name's ending:

- `.txt`, `.txt.gz`, `.txt.xz` (any other `.gz` / `.xz`): the project's corpus format (preprocess, pretrain and the
  shared corpus use it): UTF-8, a paragraph a line, a blank line between documents. A document is its lines joined by
  "\\n" (so its paragraphs are the passages' paragraphs); its id `FILE:LINE`, the file's name and the line its first
  paragraph is on; no title.
- `.json`: SQuAD JSON (v1.1 or 2.0): each paragraph's context is a document, titled with its article's title, its id
  `FILE:TITLE#N`, N counting the file's paragraphs of that title from 0 (TyDiQA and ARCD repeat titles across
  articles, and the QA sets share titles with each other: the file's name keeps ids apart).
- `.jsonl`: JSON lines, an object a line: "text" (required), "id" (a string or an integer; default `FILE:LINE`),
  "title" (a string or null; default none). Other fields are ignored.

Every problem is one InputError naming the file and the line or field. Two inputs of the same file name are refused
(their ids would collide), and so is an id given twice (Index.build names both positions).
"""
from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..artifacts.reads import (
    CORPUS_READ_ERRORS,
    MAX_DATA_FILE_BYTES,
    check_input_file,
    decompressed,
    json_line_id,
    parse_json,
)
from ..errors import ConfigError, InputError
from ..weights.files import read_text_file

FORMATS = {".json": "squad", ".jsonl": "jsonl"}


@dataclasses.dataclass
class Documents:
    texts: list[str] = dataclasses.field(default_factory=list)
    ids: list[str] = dataclasses.field(default_factory=list)
    titles: list[str | None] = dataclasses.field(default_factory=list)
    # Where each document was read (`FILE line N`, `FILE data[a].paragraphs[p]`): what an error about it names.
    sources: list[str] = dataclasses.field(default_factory=list)

    def add(self, text: str, id_: str, title: str | None, source: str) -> None:
        self.texts.append(text)
        self.ids.append(id_)
        self.titles.append(title)
        self.sources.append(source)

    def paragraphs(self) -> int:
        """The paragraph lines of all documents (a document's lines are joined by "\\n")."""
        return sum(text.count("\n") + 1 for text in self.texts)

    def first(self, count: int) -> Documents:
        """The first `count` documents."""
        return Documents(self.texts[:count], self.ids[:count], self.titles[:count], self.sources[:count])


def input_format(path: str | os.PathLike) -> str:
    name = Path(path).name.lower()
    for ending, kind in FORMATS.items():
        if name.endswith(ending):
            return kind
    return "corpus"


def read_documents(paths: list[str | os.PathLike], max_paragraphs: int | None = None) -> Documents:
    """The documents of every input, in order (see the module docstring). `max_paragraphs`: whole documents only
    while fewer paragraph lines than that were taken (the last one may pass it); the files after are not read."""
    if max_paragraphs is not None and (type(max_paragraphs) is not int or max_paragraphs < 1):
        raise ConfigError(f"max_paragraphs {max_paragraphs!r}: a whole number of paragraph lines ≥ 1")
    if not paths:
        raise ConfigError("no input files given")
    names: dict[str, str] = {}
    for path in paths:
        name = Path(path).name
        if name in names:
            raise ConfigError(f"{path} and {names[name]} have the same file name, which their documents' ids start "
                              "with: give each file once, or rename one")
        names[name] = str(path)
        check_input_file(path, "input file")
    documents = Documents()
    taken = 0
    for path in map(Path, paths):
        reader = {"squad": _squad, "jsonl": _json_lines, "corpus": _corpus}[input_format(path)]
        before = len(documents.texts)
        reader(path, documents)
        if len(documents.texts) == before:
            raise InputError("holds no documents", path=path)
        if max_paragraphs is not None:
            for position in range(before, len(documents.texts)):
                if taken >= max_paragraphs:
                    documents = documents.first(position)
                    break
                taken += documents.texts[position].count("\n") + 1
            if taken >= max_paragraphs:
                break
    first: dict[str, int] = {}
    for position, id_ in enumerate(documents.ids):
        if first.setdefault(id_, position) != position:
            raise InputError(f"{documents.sources[position]}: duplicate id {id_!r:.80} (also "
                             f"{documents.sources[first[id_]]})")
    return documents


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, line without its ending) of a UTF-8 file, .gz and .xz decompressed; lines end at "\\n"."""
    number = 0
    try:
        with open(path, "rb") as raw, decompressed(path, raw) as stream:
            for number, data in enumerate(stream, 1):
                if number == 1 and data.startswith(b"\xef\xbb\xbf"):  # a byte-order mark is no text
                    data = data[3:]
                try:
                    yield number, data.rstrip(b"\n").decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise InputError(f"invalid UTF-8 at byte {exc.start + 1} of the line ({exc.reason})", path=path,
                                     line=number) from None
    except CORPUS_READ_ERRORS as exc:
        raise InputError(f"cannot read: {exc}", path=path, line=number + 1) from None


def _corpus(path: Path, documents: Documents) -> None:
    paragraphs: list[str] = []
    first = 0
    for number, line in _lines(path):
        line = line.strip()
        if line:
            if not paragraphs:
                first = number
            paragraphs.append(line)
        elif paragraphs:
            documents.add("\n".join(paragraphs), f"{path.name}:{first}", None, f"{path} line {first}")
            paragraphs = []
    if paragraphs:
        documents.add("\n".join(paragraphs), f"{path.name}:{first}", None, f"{path} line {first}")


def _json_lines(path: Path, documents: Documents) -> None:
    for number, line in _lines(path):
        if not line.strip():
            continue
        record = parse_json(line, path=path, line=number)
        if not isinstance(record, dict):
            raise InputError(f"expected a JSON object, got {type(record).__name__}", path=path, line=number)
        text = record.get("text")
        if not isinstance(text, str) or not text.strip():
            problem = "missing" if "text" not in record else \
                "empty" if isinstance(text, str) else f"a {type(text).__name__}, not a string"
            raise InputError(problem, path=path, line=number, field="text")
        id_ = record.get("id", f"{path.name}:{number}")
        id_ = str(json_line_id(id_, path=path, line=number))
        if id_ == "":
            raise InputError("empty", path=path, line=number, field="id")
        title = record.get("title")
        if title is not None and not isinstance(title, str):
            raise InputError(f"a {type(title).__name__}, not a string or null", path=path, line=number,
                             field="title")
        documents.add(text, id_, title, f"{path} line {number}")


def _squad(path: Path, documents: Documents) -> None:
    root = parse_json(read_text_file(path, max_bytes=MAX_DATA_FILE_BYTES, bom=True), path=path)
    articles = root.get("data") if isinstance(root, dict) else None
    if not isinstance(articles, list):
        raise InputError("not SQuAD JSON: expected an object with a list of articles", path=path, field="data")
    seen: dict[str, int] = {}
    for a, article in enumerate(articles):
        title = _expect(article, dict, path, f"data[{a}]").get("title", "")
        _expect(title, str, path, f"data[{a}].title")
        for p, paragraph in enumerate(_expect(article.get("paragraphs"), list, path, f"data[{a}].paragraphs")):
            where = f"data[{a}].paragraphs[{p}]"
            context = _expect(_expect(paragraph, dict, path, where).get("context"), str, path, f"{where}.context")
            if not context.strip():
                raise InputError("empty context", path=path, field=f"{where}.context")
            n = seen[title] = seen.get(title, -1) + 1
            documents.add(context, f"{path.name}:{title}#{n}", title or None, f"{path} {where}")


def _expect(value: Any, kind: type, path: Path, field: str) -> Any:
    if not isinstance(value, kind):
        names: dict[type, str] = {dict: "an object", list: "a list", str: "a string"}
        wanted = names[kind]
        raise InputError(f"expected {wanted}, found {type(value).__name__}", path=path, field=field)
    return value
