"""Small slices of the shared data, written where a test needs files: the first documents of a corpus shard, the
first articles of a SQuAD-format dataset."""
from __future__ import annotations

import json
import lzma
from pathlib import Path

from arabert_pipeline.qa.data import read_squad


def write_first_documents(shard: Path, target: Path, documents: int) -> Path:
    """The first `documents` documents (blank-line separated) of an .xz corpus shard, written to `target`."""
    lines, seen = [], 0
    with lzma.open(shard, "rt", encoding="utf-8") as f:
        for line in f:
            lines.append(line)
            seen += not line.strip()
            if seen == documents:
                break
    target.write_text("".join(lines), encoding="utf-8")
    return target


def write_first_articles(dataset: str, target: Path, articles: int) -> Path:
    """The first `articles` articles of a dataset (registered name or path), written to `target` as SQuAD JSON."""
    data = json.loads(read_squad(dataset, misaligned="keep").path.read_text(encoding="utf-8"))
    data["data"] = data["data"][:articles]
    target.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return target
