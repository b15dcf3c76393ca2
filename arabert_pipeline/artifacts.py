"""Contracts shared by every stage: the data root, the metadata stored beside each artifact, atomic writes, bounded
reads of input files, and loading Hugging Face models; what a verb may do with its output path is outputs.py's.

Every tokenizer and model directory carries `arabert_pipeline.json` recording the preprocessing it was trained
with; downstream stages read it from there instead of guessing it from a model name.

Outputs (outputs.py): a verb never deletes or overwrites what it did not create. `claim_output_dir` /
`claim_output_file` refuse an output path that is or contains an input, a directory holding anything the verb does not
write, and an earlier output of the verb unless `--overwrite` (or `--resume`) says what to do with it; `OutputLock`
keeps a second run off an output while the first writes it.
"""
from __future__ import annotations

import contextlib
import gzip
import json
import lzma
import os
import re
import shutil
import stat
import tempfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, cast

from .errors import ArabertPipelineError, ConfigError, DataNotFoundError, InputError

# One digest and one bounded reader for every file the package checks; the layers above read them here.
from .weights.files import MAX_JSON_FILE_BYTES, _file_kind, file_digest, open_regular_file, read_text_file  # noqa: F401

if TYPE_CHECKING:
    import torch

METADATA_FILE = "arabert_pipeline.json"
# A corpus file's metadata lives beside it: corpus.txt.xz → corpus.txt.xz.arabert_pipeline.json (written by preprocess,
# read by train-tokenizer and pretrain to know how the text was preprocessed).
SIDECAR_SUFFIX = "." + METADATA_FILE
# What reading a truncated or corrupt .gz / .xz corpus raises.
CORPUS_READ_ERRORS = (OSError, EOFError, lzma.LZMAError, zlib.error)
DATA_ROOT_ENV = "ARABERT_PIPELINE_DATA"
# The models shipped inside the package, by the names every verb and Pipeline accept → their folder there.
PACKAGED_MODELS_DIR = Path(__file__).resolve().parent / "models"
SHIPPED_MODELS = {"arabert": "arabert-mini", "arabert-mini": "arabert-mini", "arabert-sentiment": "arabert-sentiment",
                  "arabert-ner": "arabert-ner"}


def shipped_model_dir(name: str | os.PathLike[str]) -> Path | None:
    """The folder in the package of the shipped model `name` names (arabert, arabert-mini, arabert-sentiment,
    arabert-ner), as Pipeline resolves it; None for any other name, or where a local path of that name exists."""
    name = os.fspath(name)
    if name not in SHIPPED_MODELS or Path(name).exists():
        return None
    return PACKAGED_MODELS_DIR / SHIPPED_MODELS[name]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


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


def sidecar_path(corpus: str | os.PathLike[str]) -> Path:
    return Path(f"{corpus}{SIDECAR_SUFFIX}")


def sidecar_preprocessing(corpus: str | os.PathLike[str]) -> str | None:
    """The preprocessing recorded in a corpus file's sidecar, or None if it has none."""
    sidecar = sidecar_path(corpus)
    if not sidecar.exists():
        return None
    name = read_json_file(sidecar).get("preprocessing")
    if not isinstance(name, str):
        raise InputError("no preprocessing name", path=sidecar, field="preprocessing")
    return name


def decompressed(path: str | os.PathLike[str], raw: BinaryIO) -> BinaryIO:
    """A binary stream of the corpus file's text over its open `raw` file: .gz and .xz decompressed, else `raw`."""
    name = str(path).lower()
    if name.endswith(".gz"):
        return cast(BinaryIO, gzip.GzipFile(fileobj=raw, mode="rb"))  # one: typeshed does not declare it so
    if name.endswith(".xz"):
        return cast(BinaryIO, lzma.LZMAFile(raw, "rb"))
    return raw


def write_metadata(directory: str | os.PathLike[str], **fields: Any) -> None:
    """Merge `fields` into the directory's metadata file (created if missing)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    current = read_metadata(directory, missing_ok=True)
    current.update(fields)
    with atomic_write(directory / METADATA_FILE) as f:
        json.dump(current, f, ensure_ascii=False, indent=2, sort_keys=True)
        f.write("\n")


def read_metadata(directory: str | os.PathLike[str], *, missing_ok: bool = False) -> dict[str, Any]:
    path = Path(directory) / METADATA_FILE
    if not os.path.lexists(path):
        if missing_ok:
            return {}
        raise ConfigError(
            f"{path} not found: {directory} was not produced by arabert-pipeline, so its preprocessing is unknown. "
            "Pass the preprocessing name explicitly."
        )
    try:
        return read_json_file(path)
    except InputError as exc:
        raise ConfigError(str(exc)) from exc


# How Rust libraries (safetensors, tokenizers) report a failed write: "I/O error: File too large (os error 27)".
_RUST_OS_ERROR = re.compile(r"\(os error (\d+)\)")


# How numpy reports a failed write to a file it opened itself (np.save(name), ndarray.tofile): fwrite's errno is lost.
_NUMPY_SHORT_WRITE = re.compile(r"\d+ requested and \d+ written")


def _short_write_errno(path: str | os.PathLike[str]) -> int | None:
    """The likely errno of a write that stopped short without saying why: a full file system (the blocks this process
    may use are gone), else a file-size limit (RLIMIT_FSIZE); None when neither explains it."""
    import errno
    import resource

    place = Path(path)
    while not place.exists() and place != place.parent:
        place = place.parent
    try:
        disk = os.statvfs(place)
    except OSError:
        disk = None
    if disk is not None and (disk.f_bfree if os.geteuid() == 0 else disk.f_bavail) * disk.f_frsize < 2**20:
        return errno.ENOSPC
    if resource.getrlimit(resource.RLIMIT_FSIZE)[0] != resource.RLIM_INFINITY:
        return errno.EFBIG
    return None


def _named_os_error(exc: OSError, path: str | os.PathLike[str]) -> OSError | None:
    """`exc` as an OSError naming `path`, when it names no file; None when it already names one."""
    if exc.filename is not None:
        return None
    if exc.errno is not None:
        return OSError(exc.errno, exc.strerror, str(path))
    if _NUMPY_SHORT_WRITE.fullmatch(str(exc)):
        errno_ = _short_write_errno(path)
        if errno_ is None:
            import errno

            return OSError(errno.EIO, f"the write stopped short ({exc})", str(path))
        return OSError(errno_, os.strerror(errno_), str(path))
    return None


@contextlib.contextmanager
def naming_io_errors(path: str | os.PathLike[str]) -> Iterator[None]:
    """Inside the block, a failed write that names no file (a full disk seen by write(), fsync(), numpy or a library's
    own writer) is re-raised as an OSError naming `path`: "No space left on device" alone does not say which output."""
    try:
        yield
    except OSError as exc:
        named = _named_os_error(exc, path)
        if named is not None:
            raise named from exc
        raise
    except Exception as exc:
        found = _RUST_OS_ERROR.search(str(exc))
        if found is None:
            raise
        errno_ = int(found.group(1))
        raise OSError(errno_, os.strerror(errno_), str(path)) from exc


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike[str], mode: str = "w", encoding: str | None = "utf-8") -> Iterator[Any]:
    """Write to a temporary file beside `path` and rename it into place only if the block succeeds.

    Only a regular file (or nothing) at `path` is replaced: the rename would turn a symlink, a device or a FIFO into a
    regular file instead of writing through it.
    """
    path = Path(path)
    check_replaceable(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes it private; the result should look like any written file
    try:
        with os.fdopen(fd, mode, encoding=None if "b" in mode else encoding) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        # A failed write (a full disk) names no file; the output it was for is what the user needs to know.
        named = _named_os_error(exc, path) if isinstance(exc, OSError) else None
        if named is not None:
            raise named from exc
        raise


@contextlib.contextmanager
def atomic_directory(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Build a directory under a temporary name and move it into place only if the block succeeds.

    An existing directory at `path` is replaced only once the new one is complete.
    """
    path = Path(path)
    if path.is_symlink():
        raise ConfigError(f"{path} is a symbolic link: an output directory is replaced by renaming, which would "
                          "replace the link; give the directory it points to")
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{path} exists and is not a directory; choose another output")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"))
    os.chmod(tmp, 0o777 & ~_umask())
    try:
        with naming_io_errors(path):
            yield tmp
        follow_umask(tmp)
        if path.exists():
            old = path.with_name(f".{path.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def follow_umask(path: str | os.PathLike[str]) -> None:
    """Give the private files at or under `path` (mode 0600: safetensors' writer and mkstemp make them so) the mode
    any file written here gets: weights are no more secret than the config beside them."""
    mode = 0o666 & ~_umask()
    paths = [os.path.join(root, name) for root, _, files in os.walk(path) for name in files] \
        if os.path.isdir(path) else [path]
    for name in paths:
        info = os.lstat(name)
        if stat.S_ISREG(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o600 and mode != 0o600:
            os.chmod(name, mode)


def load_tensor_state(path: str | os.PathLike[str]) -> Any:
    """A training state saved with torch.save, read without unpickling arbitrary objects.

    Checkpoints are user paths: a pickle can run code on load, so only tensors and plain containers are accepted.
    """
    import pickle

    import torch

    path = Path(path)
    if not path.is_file():
        raise InputError("checkpoint state not found", path=path)
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        # torch explains at length how to load it anyway; the one line that matters names the object refused.
        found = re.search(r"Unsupported global: GLOBAL (\S+)", str(exc))
        what = f"it would run {found.group(1)} on loading" if found else "it would need to unpickle objects"
        raise InputError(f"not a plain tensor checkpoint, refused ({what})", path=path) from None
    except (RuntimeError, EOFError, OSError, ValueError) as exc:
        raise InputError(f"unreadable checkpoint state ({type(exc).__name__}: {exc})", path=path) from exc


def parse_json(text: str, *, path: object = None, line: int | None = None) -> Any:
    """json.loads with every way a text can fail to be JSON an InputError naming the file (and line): invalid syntax,
    integers too long for Python's int conversion, nesting deeper than the recursion limit."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"invalid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})", path=path,
                         line=line) from None
    except ValueError as exc:  # "Exceeds the limit (4300 digits) for integer string conversion"
        raise InputError(f"invalid JSON ({(str(exc).splitlines() or [''])[0]})", path=path, line=line) from None
    except RecursionError:
        raise InputError("invalid JSON (nested too deeply)", path=path, line=line) from None


def json_lines(text: str, *, path: object = None) -> Iterator[tuple[int, Any]]:
    """(line number, value) of each non-blank line of a JSON lines text, every bad line parse_json's InputError.
    Lines end at "\n" (a "\r" before it is JSON whitespace): str.splitlines() also breaks at U+2028, U+0085 and
    form feeds, which json.dumps(ensure_ascii=False), this package's writers included, leaves raw inside strings."""
    for number, line in enumerate(text.split("\n"), start=1):
        if line.strip():
            yield number, parse_json(line, path=path, line=number)


def json_line_id(value: Any, *, path: object = None, line: int | None = None) -> str | int:
    """A JSON line's "id": a string or an integer. A float, a bool, null or an object is refused: str() would make
    another id of it ("nan", "None", "{'a': 1}") that no other file holds."""
    if not isinstance(value, (str, int)) or isinstance(value, bool):
        raise InputError(f"must be a string or an integer, got {json.dumps(value)[:80]}", path=path, line=line,
                         field="id")
    return value


# A SQuAD file, a predictions file: data read whole, far larger than metadata but still bounded (a symlink to
# /dev/zero must not fill the memory before anything can refuse it).
MAX_DATA_FILE_BYTES = 2**30


def check_input_file(path: str | os.PathLike[str], what: str = "file") -> Path:
    """`path` if it is (or links to) a regular file; else an InputError saying what is there instead: "no such
    file" for a FIFO or /dev/zero would send the user looking for a file that exists, and reading one hangs or never
    ends."""
    path = Path(path)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise InputError(f"no such {what}", path=path) from None
    except OSError as exc:
        raise InputError(f"unreadable ({exc.strerror or exc})", path=path) from None
    kind = _file_kind(info.st_mode)
    if kind is not None:
        raise InputError(f"is {kind}, not a regular file: give the {what} itself", path=path)
    return path


def read_json_file(path: str | os.PathLike[str], *, max_bytes: int = MAX_JSON_FILE_BYTES,
                   bom: bool = False) -> dict[str, Any]:
    """A JSON file that must hold an object; any problem is an InputError naming the file."""
    value = parse_json(read_text_file(path, max_bytes=max_bytes, bom=bom), path=path)
    if not isinstance(value, dict):
        raise InputError(f"expected a JSON object, found {type(value).__name__}", path=path)
    return value


# Outputs (the rules of what a verb may write are in outputs.py) ----------------------------------------------------

def check_replaceable(path: str | os.PathLike[str], flag: str | None = None) -> None:
    """Refuse to replace anything at `path` but a regular file: outputs are renamed into place, and a rename
    replaces a symlink, a device node or a FIFO itself (as root, even /dev/stdout) instead of writing through it."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise ConfigError(f"{flag + ' ' if flag else ''}{path}: cannot inspect it ({exc.strerror or exc})") from None
    kind = _file_kind(info.st_mode)
    if kind is not None:
        raise ConfigError(f"{flag + ' ' if flag else ''}{path} is {kind}: outputs are only written as new regular "
                          "files, never through or over anything else; choose another file name")


def looks_like_local_path(name: str) -> bool:
    """Whether a model/tokenizer argument is meant as a local path rather than a hub id ("name" or "owner/name").

    A path form (leading `.`, `/` or `~`, more than one separator, a backslash) is local; so is "a/b" when `a` is a
    local directory: `runs/qa-smal` with a `runs/` beside it is a typo, not a hub repository to look up.
    """
    if name.startswith((".", "/", "~")) or "\\" in name or name.count("/") > 1:
        return True
    owner, sep, _ = name.partition("/")
    return bool(sep) and Path(owner).is_dir()


def check_local_source(source: str | os.PathLike[str], what: str = "model") -> None:
    """A `source` that looks like a local path must exist: fail at once instead of asking the hub for it."""
    name = os.fspath(source)
    if not Path(name).expanduser().exists() and looks_like_local_path(name):
        raise ConfigError(f"{what} directory {name} does not exist")


# Loading models and tokenizers ----------------------------------------------------------------------------------------

def describe_exception(exc: BaseException) -> str:
    """`Type: first line of the message`, for errors that wrap a library's exception."""
    return f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0]}"


# config.json fields that size the model: each must be a positive integer (a string "32000" or -1 layers would load
# a different model than the weights hold, or none at all).
SIZE_FIELDS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
               "max_position_embeddings", "type_vocab_size")


def model_config(directory: str | os.PathLike[str]) -> dict[str, Any]:
    """A model directory's config.json, with the fields that size the model checked."""
    path = Path(directory) / "config.json"
    if not os.path.lexists(path):
        raise ConfigError(f"{directory} is not a model directory (no config.json)")
    try:
        config = read_json_file(path)
    except InputError as exc:
        raise ConfigError(str(exc)) from exc
    for field in SIZE_FIELDS:
        value = config.get(field)
        # DeBERTa-v2 has no token types (0); an encoder of 0 layers (embeddings + head) is a model too
        low = 0 if field in ("type_vocab_size", "num_hidden_layers") else 1
        if field in config and (type(value) is not int or not low <= value <= 2**31):
            raise ConfigError(f"{path}: {field} must be an integer ≥ {low}, not {value!r}")
    return config


def load_pretrained_model(auto_class: Any, source: str | os.PathLike[str], **kwargs: Any) -> tuple[Any, dict[str, Any]]:
    """(model, loading info) from `auto_class.from_pretrained`, with each way a model directory can be broken (no or
    invalid config.json, truncated weights, weights of another shape than the config says) a ConfigError naming it."""
    path = Path(source)
    if path.is_dir():
        model_config(path)
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # its load report would print the mismatches raised below as a table first
    try:
        from .weights.loading import from_pretrained  # int8 rows (issue 53) widened to fp32 there

        model, info = from_pretrained(auto_class, source, output_loading_info=True, ignore_mismatched_sizes=True,
                                      **kwargs)
    except ArabertPipelineError:  # weights/'s checks of the weights file name the file and field themselves
        raise
    except Exception as exc:  # safetensors, JSON, shape and I/O errors all mean "cannot load this"
        raise ConfigError(f"cannot load the model in {source} ({describe_exception(exc)})") from exc
    finally:
        hf_logging.set_verbosity(verbosity)
    mismatched = sorted(info.get("mismatched_keys") or (), key=lambda item: item[0])
    if mismatched:
        key, stored, expected = mismatched[0]
        more = f" ({len(mismatched) - 1} more tensors differ)" if len(mismatched) > 1 else ""
        raise ConfigError(f"{source}: the weights do not fit config.json: {key} is {tuple(stored)} in the weights "
                          f"but {tuple(expected)} by the config{more}")
    # The encoder must be the one the weights hold, tensor for tensor (a task head may be new or left out: a QA model
    # made from a pretrained MLM checkpoint). transformers only warns when config.json asks for fewer or more layers.
    prefix = f"{model.base_model_prefix}." if getattr(model, "base_model_prefix", "") else None
    for kind, where in (("unexpected_keys", "in the weights are unused by"), ("missing_keys", "are missing for")):
        keys = sorted(k for k in info.get(kind) or () if prefix and k.startswith(prefix) and ".pooler." not in k)
        if keys:
            more = f" and {len(keys) - 1} more" if len(keys) > 1 else ""
            raise ConfigError(f"{source}: the weights do not fit config.json: encoder tensors {where} the model it "
                              f"describes ({keys[0]}{more}); check num_hidden_layers and the other sizes in "
                              "config.json")
    return model, info


def check_vocabulary_size(model: Any, tokenizer: Any, source: object) -> None:
    """The tokenizer's ids index the model's embedding rows one to one: another size means another tokenizer."""
    rows = model.get_input_embeddings().num_embeddings
    if len(tokenizer) != rows:
        raise ConfigError(
            f"{source}: the tokenizer has {len(tokenizer)} tokens but the model has {rows} token embeddings; "
            "the tokenizer files do not belong to this model"
        )


def torch_device(name: object) -> torch.device:
    """A torch.device for `name` that exists on this machine, or a ConfigError saying what is available."""
    import torch

    try:
        device: torch.device = torch.device(name)  # type: ignore[call-overload]  # anything: its TypeError is the check
    except (RuntimeError, TypeError) as exc:
        raise ConfigError(f"device {name!r} is not a torch device (cpu, cuda, cuda:1, mps, ...)") from exc
    available = {"cpu": True, "cuda": torch.cuda.is_available(), "mps": torch.backends.mps.is_available()}
    if not available.get(device.type, False):
        raise ConfigError(f"device {name!r} is not available on this machine (torch {torch.__version__}); use cpu")
    # torch types index as an int; it is None for "cuda" without a number
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():  # type: ignore[redundant-expr]
        raise ConfigError(f"device {name!r}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    return device
