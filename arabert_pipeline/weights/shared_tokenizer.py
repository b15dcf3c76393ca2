"""A model dir's tokenizer.json: its own, or the sibling model's that its tokenizer.shared.json names (a shipped task
model shares another's, issue 53), digest-checked both ways. `share_tokenizer` writes such a reference,
`copy_tokenizer_json` resolves one into a copy that stands alone. Here, in the lowest layer, so that every copy of a
model dir can resolve it."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ..errors import ConfigError, InputError
from .files import read_text_file

# A shipped task model whose tokenizer is another shipped model's (issue 53: one copy in the package) holds, instead of
# tokenizer.json, this file: {"file": "../OTHER/tokenizer.json", "sha256": its digest}, checked when it is read.
SHARED_TOKENIZER_FILE = "tokenizer.shared.json"


def read_tokenizer_json(directory: str | os.PathLike[str]) -> tuple[str, Path]:
    """(text, path) of a model dir's tokenizer.json, which must be the file any sibling model's tokenizer.shared.json
    records for it; or of the sibling model's that its own tokenizer.shared.json names, found beside DIRECTORY (as
    given) or beside the directory it links to, and which must be the file whose digest the reference records. Each
    file is read as open_regular_file reads one: a FIFO, a device or a file of more than MAX_JSON_FILE_BYTES is a
    ConfigError naming it."""
    import hashlib

    directory = Path(directory)
    path, shared = directory / "tokenizer.json", directory / SHARED_TOKENIZER_FILE
    if os.path.lexists(path) or not os.path.lexists(shared):
        if not os.path.lexists(path):
            raise ConfigError(f"{directory} has no tokenizer.json, which the ONNX backend tokenizes with")
        text = _read_tokenizer_text(path)
        check_shared_copies(directory, hashlib.sha256(text.encode("utf-8")).hexdigest())
        return text, path
    ref = _read_reference(shared)
    sibling, digest = _referenced_sibling(shared, ref.get("file")), ref.get("sha256")
    # Beside the directory as given (a copy of the models folder), else beside the one a link to it leads to.
    places = dict.fromkeys(base.parent / sibling / "tokenizer.json"
                           for base in (Path(os.path.abspath(directory)), directory.resolve()))
    found = next((place for place in places if os.path.lexists(place)), None)
    if found is None:
        raise ConfigError(
            f"{shared} names ../{sibling}/tokenizer.json, which is not beside {directory}: this model dir shares "
            f"{sibling}'s tokenizer and was copied without it. `arabert-pipeline export-onnx MODEL --standalone DIR` "
            "writes a copy that holds its own tokenizer (MODEL: the model dir it was copied from, or a shipped "
            "model's name: arabert-sentiment, arabert-ner)")
    text = _read_tokenizer_text(found, named_by=shared)
    if hashlib.sha256(text.encode("utf-8")).hexdigest() != digest:
        raise ConfigError(f"{found} is not the tokenizer {shared} records (its digest differs)")
    return text, found


def _read_tokenizer_text(path: Path, named_by: Path | None = None) -> str:
    try:
        return read_text_file(path)
    except InputError as exc:
        raise ConfigError(f"{named_by} names {exc}" if named_by else str(exc)) from None


def _referenced_sibling(shared: Path, name: object) -> str:
    """The sibling model's folder name in a tokenizer.shared.json's "file": it must be ../MODEL/tokenizer.json."""
    from pathlib import PurePosixPath

    parts = PurePosixPath(name).parts if isinstance(name, str) else ()
    if len(parts) != 3 or parts[0] != ".." or parts[1] in ("", ".", "..") or parts[2] != "tokenizer.json" \
            or "\0" in parts[1] or "\\" in parts[1]:
        raise ConfigError(f"{shared}: file must be ../MODEL/tokenizer.json (a sibling model's), not {name!r}")
    return parts[1]


def check_shared_copies(directory: str | os.PathLike[str], digest: str) -> None:
    """DIRECTORY's own tokenizer.json (SHA-256 `digest`) against what every sibling model dir's tokenizer.shared.json
    records for it: the siblings read it as theirs, so a changed file (two vocabulary pieces swapped) is refused by
    name instead of silently changing the answers of all of them. A sibling's unreadable reference is its own to
    report, when it is loaded."""
    from pathlib import PurePosixPath

    directory = Path(os.path.abspath(directory))
    for reference in sorted(directory.parent.glob(f"*/{SHARED_TOKENIZER_FILE}")):
        try:
            ref = _read_reference(reference)
        except ConfigError:
            continue
        name = ref.get("file")
        if isinstance(name, str) and PurePosixPath(name).parts == ("..", directory.name, "tokenizer.json") \
                and ref.get("sha256") != digest:
            raise ConfigError(f"{directory / 'tokenizer.json'} is not the tokenizer {reference} records for it (its "
                              "digest differs): the file was changed; restore it")


def share_tokenizer(directory: str | os.PathLike[str], source: str | os.PathLike[str]) -> None:
    """Replace DIRECTORY/tokenizer.json by a tokenizer.shared.json naming SOURCE/tokenizer.json (a sibling model dir
    holding the identical file)."""
    import hashlib

    directory, source = Path(directory), Path(source)
    if directory.resolve().parent != source.resolve().parent:
        raise ConfigError(f"{source} is not a sibling of {directory}")
    ours, theirs = (directory / "tokenizer.json").read_bytes(), (source / "tokenizer.json").read_bytes()
    if ours != theirs:
        raise ConfigError(f"{directory / 'tokenizer.json'} differs from {source / 'tokenizer.json'}: not shared")
    ref = {"file": f"../{source.resolve().name}/tokenizer.json", "sha256": hashlib.sha256(theirs).hexdigest()}
    (directory / SHARED_TOKENIZER_FILE).write_text(json.dumps(ref, indent=2) + "\n", encoding="utf-8")
    (directory / "tokenizer.json").unlink()


def _read_reference(path: Path) -> dict[str, Any]:
    # A few bytes of JSON; artifacts.reads.read_json_file lies a layer above this module.
    try:
        ref = json.loads(read_text_file(path, max_bytes=1 << 16))
    except InputError as exc:
        raise ConfigError(str(exc)) from None
    except (ValueError, RecursionError) as exc:
        raise ConfigError(f"{path}: not a shared-tokenizer reference ({type(exc).__name__})") from None
    if not isinstance(ref, dict):
        raise ConfigError(f"{path}: expected a JSON object with file and sha256")
    return ref


def copy_tokenizer_json(model_dir: str | os.PathLike[str], target: str | os.PathLike[str]) -> bool:
    """Write TARGET/tokenizer.json from MODEL_DIR's own, or from the sibling model's that its tokenizer.shared.json
    names (digest-checked): a copy of a model dir stands alone, where a reference to ../OTHER would name nothing.
    False when MODEL_DIR has neither."""
    model_dir = Path(model_dir)
    if not (model_dir / "tokenizer.json").is_file() and not (model_dir / SHARED_TOKENIZER_FILE).is_file():
        return False
    text, _ = read_tokenizer_json(model_dir)
    (Path(target) / "tokenizer.json").write_text(text, encoding="utf-8")
    return True
