"""Loading a tokenizer: a Hugging Face one from a model or tokenizer directory or the hub (`load_pretrained_tokenizer`,
hub tokenizers mended to keep the Farasa markers whole, markers.py), and any vocabulary source with the
preprocessing it expects (`load_tokenizer`)."""
from __future__ import annotations

import os
from pathlib import Path

from ..artifacts.metadata import METADATA_FILE, read_metadata
from ..artifacts.models import describe_exception, looks_like_local_path
from ..errors import ConfigError, InputError
from ..outputs import TOKENIZER_VOCAB_FILES
from ..weights.files import MAX_JSON_FILE_BYTES, file_digest, open_regular_file
from ..weights.shared_tokenizer import check_shared_copies
from .export import fetch_vocab, read_vocab_file, wordpiece_backend, wrap_fast
from .markers import keep_whole


def load_pretrained_tokenizer(source: str | os.PathLike,
                              hint: str = "a model directory needs the tokenizer it was trained with saved beside it"):
    """AutoTokenizer.from_pretrained(source); a local directory must hold tokenizer files (without them transformers
    builds a 5-token default vocabulary that tokenizes everything as [UNK]), and any failure names the source.
    A hub tokenizer that would split the Farasa markers or placeholders its model saw whole is mended
    (tokenizer/markers.py, arabert issue #151)."""
    from transformers import AutoTokenizer

    path = Path(source)
    if path.is_dir():
        # A FIFO or device there would hang or flood the tokenizer's reader, a sparse file of gigabytes fill the memory.
        for name in TOKENIZER_VOCAB_FILES:
            if os.path.lexists(path / name):
                try:
                    open_regular_file(path / name, max_bytes=MAX_JSON_FILE_BYTES).close()
                except InputError as exc:
                    raise ConfigError(f"{exc}: not a tokenizer file") from None
        if (path / "tokenizer.json").is_file():  # one that sibling model dirs share must be the file they record
            check_shared_copies(path, file_digest(path / "tokenizer.json"))
    if path.is_dir() and not any((path / name).is_file() for name in TOKENIZER_VOCAB_FILES):
        raise ConfigError(
            f"{path} holds no tokenizer files (none of {', '.join(TOKENIZER_VOCAB_FILES)}): {hint}"
        )
    try:
        tokenizer = AutoTokenizer.from_pretrained(os.fspath(source))
    except Exception as exc:  # whatever a broken or foreign directory raises, the user needs its name
        raise ConfigError(f"cannot load a tokenizer from {source} ({describe_exception(exc)})") from exc
    keep_whole(tokenizer, source)
    return tokenizer


def load_tokenizer(source: str | os.PathLike, preprocessing: str | None = None):
    """(fast tokenizer, preprocessing name) for a tokenizer or model directory, a vocab.txt or a hub id.

    A directory of ours carries its preprocessing in `arabert_pipeline.json`; passing a different one is an error.
    Anything else (a foreign directory, a vocab.txt, a hub id) needs `preprocessing` spelled out: "none" for
    mBERT, "arabertv2" for the AraBERTv2 vocabulary, "arabertv02" for AraBERTv0.2 / AraELECTRA.
    """
    path = Path(source)
    if path.is_dir():
        stored = read_metadata(path, missing_ok=True).get("preprocessing")
        if stored is None and preprocessing is None:
            raise ConfigError(
                f"{path / METADATA_FILE} not found: {path} was not produced by arabert-pipeline, so the "
                "preprocessing its tokenizer expects is unknown. Pass it explicitly (e.g. preprocessing='none' for "
                "mBERT, 'arabertv2' for AraBERTv2)."
            )
        if stored is not None and preprocessing is not None and stored != preprocessing:
            raise ConfigError(f"{path} was built for preprocessing {stored!r}, not {preprocessing!r}")
        tokenizer = load_pretrained_tokenizer(path)
        if not tokenizer.is_fast:
            raise ConfigError(f"{path}: no fast tokenizer (tokenizer.json) could be loaded; offsets need one")
        return tokenizer, stored or preprocessing
    if not path.exists() and looks_like_local_path(str(source)):
        raise InputError("no such file or directory", path=path)
    if preprocessing is None:
        raise ConfigError(
            f"{source}: a vocabulary file or hub id does not say which preprocessing it expects; pass it "
            "explicitly (e.g. 'none' for mBERT, 'arabertv2' for the AraBERTv2 vocabulary)."
        )
    backend = wordpiece_backend(read_vocab_file(fetch_vocab(source)), preprocessing)
    return wrap_fast(backend), preprocessing
