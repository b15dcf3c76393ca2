"""The data root, where registered datasets live, and paths as recorded in artifacts that leave this machine."""
from __future__ import annotations

import os
from pathlib import Path

from ..errors import DataNotFoundError

DATA_ROOT_ENV = "ARABERT_PIPELINE_DATA"


def data_root() -> Path:
    """Where registered datasets live: `$ARABERT_PIPELINE_DATA`, else `~/.cache/arabert_pipeline/data`."""
    env = os.environ.get(DATA_ROOT_ENV)
    if env:
        return Path(env).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "arabert_pipeline" / "data"


def portable_path(path: str | os.PathLike[str]) -> str:
    """A path as recorded in artifacts that leave this machine: under the data root, `$ARABERT_PIPELINE_DATA/...`
    (also when given relative, as with ARABERT_PIPELINE_DATA=../shared/data); under the working directory, relative to
    it; another absolute path, its last component; another relative path, a hub id or a name, unchanged."""
    text = str(path)
    relative = not os.path.isabs(text)
    if relative and not os.path.exists(text):  # a name or a hub id
        return text
    resolved = Path(text).resolve()
    for root, name in ((data_root().resolve(), f"${DATA_ROOT_ENV}"), (Path.cwd().resolve(), ".")):
        if resolved == root or root in resolved.parents:
            return str(Path(name) / resolved.relative_to(root))
    return text if relative else resolved.name


def data_file(relative: str) -> Path:
    """A file under the data root, or a clear error saying where it was expected."""
    path = data_root() / relative
    if not path.exists():
        raise DataNotFoundError(
            f"{path} not found. Put the file there, or point ${DATA_ROOT_ENV} at a folder that holds {relative}."
        )
    return path
