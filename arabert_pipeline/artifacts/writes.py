"""Outputs written atomically: a file or a directory is renamed into place only once complete, only a regular file is
ever replaced, a failed write names the output it was for, and written files get the mode the umask gives (what a
verb may write at all is outputs.py's)."""
from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..weights.files import file_kind


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


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


def check_replaceable(path: str | os.PathLike[str], flag: str | None = None) -> None:
    """Refuse to replace anything at `path` but a regular file: outputs are renamed into place, and a rename
    replaces a symlink, a device node or a FIFO itself (as root, even /dev/stdout) instead of writing through it."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise ConfigError(f"{flag + ' ' if flag else ''}{path}: cannot inspect it ({exc.strerror or exc})") from None
    kind = file_kind(info.st_mode)
    if kind is not None:
        raise ConfigError(f"{flag + ' ' if flag else ''}{path} is {kind}: outputs are only written as new regular "
                          "files, never through or over anything else; choose another file name")
