"""What a verb may write, and how it claims it: each verb's output kind (`OutputKind`: the names it writes, the marks of
an earlier output of its own), the claim of an output directory or file (never an input, never what another verb or
a user wrote unless told to replace it), the lock that keeps a second run off an output being written, and the removal
of what a killed run left half-written."""
from __future__ import annotations

import dataclasses
import fnmatch
import os
import re
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path

from .artifacts.metadata import METADATA_FILE, read_metadata
from .artifacts.writes import check_replaceable
from .errors import ConfigError
from .weights.files import file_kind

# What a Hugging Face model or tokenizer directory of ours holds (fnmatch patterns); model.onnx is export-onnx's.
MODEL_DIR_FILES = (
    "config.json", "generation_config.json", "model.safetensors", "model-*-of-*.safetensors", "model.onnx",
    "model.safetensors.index.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
    "added_tokens.json", "vocab.txt", "sentencepiece.model", METADATA_FILE,
)

# Files from which AutoTokenizer builds a real vocabulary; without one it silently makes a 5-token default.
TOKENIZER_VOCAB_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "sentencepiece.model", "spiece.model",
                         "sentencepiece.bpe.model", "tokenizer.model")


@dataclasses.dataclass(frozen=True)
class OutputKind:
    """What one verb writes into its output directory, so that an earlier output of its own is told from anything
    else: every entry matches `names` (hidden `*.tmp` leftovers of a killed run included), and one of `markers`
    exists or the directory's arabert_pipeline.json has `metadata_marker` (field, value), the value one string or a
    tuple of the strings the verb writes there.
    """

    verb: str
    names: tuple[str, ...]
    markers: tuple[str, ...]
    metadata_marker: tuple[str, str | tuple[str, ...]] | None = None
    resumable: bool = False

    def owns(self, name: str) -> bool:
        return (name.startswith(".") and name.endswith(".tmp")) or any(fnmatch.fnmatchcase(name, p) for p in self.names)

    def marked(self, directory: Path) -> bool:
        if any((directory / marker).exists() for marker in self.markers):
            return True
        if self.metadata_marker is None:
            return False
        field, values = self.metadata_marker
        try:
            found = read_metadata(directory, missing_ok=True).get(field)
            return found == values if isinstance(values, str) else found in values
        except ConfigError:
            return False


def check_not_input(output: str | os.PathLike, inputs: Iterable[str | os.PathLike], flag: str = "-o", *,
                    within: bool = False) -> None:
    """Refuse an output path that is one of the inputs or a directory holding one; `within`: or a path inside an
    input directory (a model dir made inside the runs it is made from would change them, its lock file first)."""
    target = Path(output).resolve()
    for source in inputs:
        resolved = Path(source).resolve()
        if resolved == target or target in resolved.parents:
            where = "is" if resolved == target else "contains"
            raise ConfigError(f"{flag} {output} {where} the input {source}: writing it would destroy the input")
        if within and resolved in target.parents:
            raise ConfigError(f"{flag} {output} is inside the input {source}: inputs are read, never written into; "
                              "choose a directory outside it")


def claim_output_dir(output: str | os.PathLike, kind: OutputKind, *, inputs: Iterable[str | os.PathLike] = (),
                     overwrite: bool = False, resume: bool = False) -> bool:
    """Check that `kind.verb` may write the directory `output`; True if it holds an earlier output of that verb.

    Refused: an output that is or contains an input; a file; a directory with anything the verb does not write (even
    with `overwrite`); an earlier output of the verb unless `overwrite` (replace it) or `resume` (continue it).
    """
    output = Path(output)
    check_not_input(output, inputs)
    if output.exists() and not output.is_dir():
        raise ConfigError(f"{output} exists and is not a directory; choose another output directory")
    entries = sorted(p.name for p in output.iterdir()) if output.is_dir() else []
    if not entries:
        return False
    foreign = [name for name in entries if not kind.owns(name)]
    if foreign or not kind.marked(output):
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        raise ConfigError(
            f"{output} is not empty and was not written by `arabert-pipeline {kind.verb}`"
            + (f" (it holds {shown})" if foreign else "")
            + ": choose another output directory; this one is never deleted or overwritten"
        )
    if not (overwrite or resume):
        options = "pass --resume to continue it, --overwrite to replace it" if kind.resumable else \
            "pass --overwrite to replace it"
        raise ConfigError(f"{output} holds an earlier `arabert-pipeline {kind.verb}` output: {options}, or choose "
                          "another output directory")
    return True


def remove_own_entries(output: str | os.PathLike, kind: OutputKind) -> None:
    """Empty an earlier output of `kind` (checked by claim_output_dir) before it is written again."""
    for path in Path(output).iterdir():
        if kind.owns(path.name):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()


def check_directory_writable(directory: str | os.PathLike, flag: str = "-o") -> None:
    """Create and remove a temporary file in `directory` (made if missing), so that a read-only or missing place
    fails before hours of work instead of after them."""
    directory = Path(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=directory, prefix=".arabert-pipeline-probe.", suffix=".tmp")
    except OSError as exc:
        raise ConfigError(f"{flag}: cannot write in {directory} ({exc.strerror or exc})") from None
    os.close(fd)
    os.unlink(probe)


def claim_output_file(output: str | os.PathLike, *, verb: str, inputs: Iterable[str | os.PathLike] = (),
                      overwrite: bool = False, flag: str = "-o") -> None:
    """Check that `verb` may write the file `output`: not an input, not a directory, not a symlink or special file,
    not an existing file unless `overwrite`, in a directory this process can write."""
    output = Path(output)
    if output.is_dir() and not output.is_symlink():
        raise ConfigError(f"{flag} {output} is a directory; give a file name")
    check_not_input(output, inputs, flag)
    check_replaceable(output, flag)
    if output.exists() and not overwrite:
        raise ConfigError(f"{flag} {output} exists: pass --overwrite to replace it, or choose another file")
    check_directory_writable(output.parent, flag)


def remove_stale_temporaries(directory: str | os.PathLike, pattern: str) -> None:
    """Delete what a killed run left half-written (atomic_write / atomic_directory temporaries matching `pattern`);
    call it only while holding the output's lock, so that no live run's temporaries are taken."""
    directory = Path(directory)
    for path in directory.glob(pattern) if directory.is_dir() else ():
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)

# What a lock file of ours holds: the holder's PID and a newline, or nothing yet (created, not yet written).
_LOCK_CONTENT = re.compile(rb"\d{0,20}\n?")


class OutputLock:
    """An exclusive lock on one output path for the length of a run: `.NAME.lock` beside it, held with flock and
    holding the owner's PID. The kernel drops the lock when its process dies, so a killed run never blocks the next.

        with OutputLock("runs/qa", "finetune"):
            ...

    The lock file is opened without following symlinks and only taken over when it is a regular file holding what a
    lock of ours holds (a PID): a planted symlink or a user's own file of that name is refused, never truncated or
    deleted.
    """

    def __init__(self, output: str | os.PathLike, verb: str):
        self.output = Path(output)
        self.verb = verb
        self.path = self.output.with_name(f".{self.output.name}.lock")
        self.fd: int | None = None

    def _refuse(self, why: str) -> ConfigError:
        return ConfigError(f"{self.path} {why}, so it cannot serve as the lock of {self.output}: move it away or "
                           "choose another output (it is left untouched)")

    def _open(self) -> int | None:
        """A descriptor on the lock file (created if missing), or None when it vanished between two calls."""
        try:
            return os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)
        except FileExistsError:
            pass
        try:
            # O_NONBLOCK: opening a FIFO planted under the lock's name must not hang.
            fd = os.open(self.path, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if os.path.islink(self.path):
                raise self._refuse("is a symbolic link") from None
            raise ConfigError(f"cannot open the lock file {self.path} ({exc.strerror or exc})") from None
        kind = file_kind(os.fstat(fd).st_mode)
        if kind is not None:
            os.close(fd)
            raise self._refuse(f"is {kind}")
        return fd

    def acquire(self) -> OutputLock:
        import fcntl

        self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            fd = self._open()
            if fd is None:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
                os.close(fd)
                raise ConfigError(
                    f"{self.output} is in use by PID {holder or '(starting)'} (another `arabert-pipeline "
                    f"{self.verb}` run writes it): wait for that run to end, or choose another output"
                ) from None
            try:
                # The previous holder unlinks the file before releasing it: a lock on an unlinked file guards nothing.
                same = os.path.samestat(os.fstat(fd), os.stat(self.path, follow_symlinks=False))
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        if not _LOCK_CONTENT.fullmatch(os.pread(fd, 64, 0)):
            os.close(fd)
            raise self._refuse("holds something other than an arabert-pipeline lock (a PID)")
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode("ascii"))
        self.fd = fd
        return self

    def release(self) -> None:
        if self.fd is not None:
            try:  # only the file this lock holds: never one put in its place meanwhile
                if os.path.samestat(os.fstat(self.fd), os.stat(self.path, follow_symlinks=False)):
                    self.path.unlink()
            except FileNotFoundError:
                pass
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> OutputLock:
        return self.acquire()

    def __exit__(self, *exc_info) -> None:
        self.release()
