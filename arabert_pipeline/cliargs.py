"""Flags shared by the verbs' parsers: old names kept for one release as hidden, deprecated aliases.

One concept has one flag name in every verb (`--preprocessing`, `-o/--output`, `--bf16 auto|on|off`); where a verb
used another name, that name still works, warns once on stderr and is hidden from `--help`.
"""
from __future__ import annotations

import argparse
import logging

log = logging.getLogger(__name__)
BF16_CHOICES = ("auto", "on", "off")
_OLD_BF16 = {"yes": "on", "no": "off"}


def add_deprecated_alias(parser: argparse.ArgumentParser, old: str, new: str, *, dest: str, **options) -> None:
    """`old` does what `new` does (same `dest`), with a warning naming `new`; add it after `new`."""

    class Alias(argparse.Action):
        def __call__(self, parser, namespace, values, option_string=None):
            log.warning(f"{option_string} is deprecated and will be removed in the next release: use {new}")
            setattr(namespace, self.dest, True if self.nargs == 0 else values)

    if options.pop("action", None) == "store_true":
        options["nargs"] = 0
    parser.add_argument(old, dest=dest, action=Alias, default=argparse.SUPPRESS, help=argparse.SUPPRESS, **options)


def bf16_choice(value: str) -> str:
    """argparse `type` of --bf16: auto/on/off, and the old yes/no with a warning."""
    if value in _OLD_BF16:
        log.warning(f"--bf16 {value} is deprecated and will be removed in the next release: use "
                    f"--bf16 {_OLD_BF16[value]}")
        return _OLD_BF16[value]
    return value


# numpy's legacy RandomState, scikit-learn's random_state and torch's manual_seed on some builds take 32 bits: a
# seed past them fails deep inside a library, after data is read and models are loaded, or (negative) is refused
# by one library and taken by another.
MAX_SEED = 2**32 - 1


def check_seed(seed: object, flag: str = "--seed") -> int:
    """`seed` if it is an integer in [0, MAX_SEED], else a ConfigError naming `flag`: checked before any work."""
    from .errors import ConfigError

    if type(seed) is not int or not 0 <= seed <= MAX_SEED:
        raise ConfigError(f"{flag} {seed!r}: use an integer between 0 and {MAX_SEED}")
    return seed
