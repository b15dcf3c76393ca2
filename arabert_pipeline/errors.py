"""One exception family, so the CLI can print any of them without a traceback."""
from __future__ import annotations


class ArabertPipelineError(Exception):
    """Base class for every error this package raises on purpose."""


class InputError(ArabertPipelineError, ValueError):
    """Bad user input: a file, a line, a field or a question id is named in the message."""

    def __init__(self, message: str, *, path: object = None, line: int | None = None, field: str | None = None):
        where = []
        if path is not None:
            where.append(str(path))
        if line is not None:
            where.append(f"line {line}")
        if field is not None:
            where.append(field)
        super().__init__(f"{': '.join(where)}: {message}" if where else message)
        self.path, self.line, self.field = path, line, field


class ConfigError(ArabertPipelineError, ValueError):
    """An option or a stored configuration that cannot work (unknown name, mismatched vocab, ...)."""


class BackendError(ArabertPipelineError, RuntimeError):
    """An external tool (Farasa jar, ...) failed or returned an unusable result."""


class DataNotFoundError(ArabertPipelineError, FileNotFoundError):
    """A registered dataset or file is not under the data root; the message says where to put it."""
