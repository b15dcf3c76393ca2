"""Farasa segmentation and AraBERT's `+` marking.

Backends implement the `Segmenter` protocol: `segment_words(words) -> list[list[str]]` gives, for each word, the
Farasa tokens it becomes, each in Farasa notation (`و+س+يكتب+ون+ها`). A word is usually one token, but Farasa splits
some (`[رابط]` → `[`, `رابط`, `]`). Two backends:

- `FarasaPySegmenter`: the pure-Python Farasa port (`farasa==0.0.1`), offline, no Java. Imported on first use
  (its pickles take about a second to load).
- `FarasaJarSegmenter(jar_path)`: QCRI's official `FarasaSegmenterJar.jar`, one long-lived `java -jar` process fed
  one word per line in batches. Chosen by `Preprocessor("arabertv2", farasa_jar=...)` or the environment variable
  ARABERT_PIPELINE_FARASA_JAR.

Both derive from `CachedSegmenter`: each distinct word reaches the backend once, and the word cache (bounded,
oldest entries dropped first) can be shared between processes and runs:

- `cache_items() -> dict[str, str]`: every cached word → its Farasa output as one string, the tokens joined by a
  space (a normalized word never contains whitespace);
- `drain_new() -> dict[str, str]`: the same, for the words the backend segmented since the previous call (at most
  the cache size of them, the newest);
- `preload(entries)`: add such entries (from another process, or a file of a previous run);
- `lookups` / `hits`: words asked for / answered without the backend (counters a caller may reset).
- `name`: names the backend; cached segmentations are only valid for the same name.

The placeholders `[رابط]`, `[بريد]`, `[مستخدم]` are never sent to a backend: their tokens are fixed (`[`, the word,
`]`), so they come out whole (the port alone would write `[بريد]` as `ب+ ريد`).

No backend may return an empty segmentation for a non-empty word: that raises `BackendError`.

`mark_tokens` turns a line's Farasa tokens into AraBERT v2 text exactly as `ArabertPreprocessor._farasa_segment`
does; `desegment` undoes it like `ArabertPreprocessor.desegment`.
"""
from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import subprocess
import tempfile
import threading
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Protocol, cast

from ..errors import BackendError

PREFIXES = frozenset(["ال", "و", "ف", "ب", "ك", "ل", "لل", "س"])
SUFFIXES = frozenset(["ه", "ها", "ك", "ي", "هما", "كما", "نا", "كم", "هم", "هن", "كن", "ا", "ان", "ين", "ون", "وا",
                      "ات", "ت", "ن", "ة"])
KAF = "ك"
PLACEHOLDER_WORDS = frozenset(["رابط", "بريد", "مستخدم"])
# Placeholders are never segmented, whatever the backend would do (the port reads بريد as ب+ريد): Farasa's tokens
# for them are fixed, and the marking then writes them back whole.
PLACEHOLDER_TOKENS = {f"[{w}]": ["[", w, "]"] for w in PLACEHOLDER_WORDS}
BRACKETS = frozenset(["[", "]"])
FARASA_SEPARATOR = ";"
JAR_ENV = "ARABERT_PIPELINE_FARASA_JAR"
DEFAULT_CACHE_SIZE = 2_000_000


class Segmenter(Protocol):
    name: str

    def segment_words(self, words: list[str]) -> list[list[str]]:
        """For each word, its Farasa tokens (`+` between the segments of a token)."""


class CachedSegmenter:
    """Word cache and statistics shared by the backends; a backend implements `_segment_new(words) -> list[str]`."""

    name = "segmenter"

    def __init__(self, cache_size: int = DEFAULT_CACHE_SIZE):
        self.cache_size = cache_size
        self._cache: dict[str, list[str]] = dict(PLACEHOLDER_TOKENS)
        self._new: dict[str, list[str]] = {}
        self.lookups = 0
        self.hits = 0

    def segment_words(self, words: list[str]) -> list[list[str]]:
        cache = self._cache
        missing = list(dict.fromkeys(w for w in words if w not in cache))
        self.lookups += len(words)
        self.hits += len(words) - len(missing)
        if missing:
            fresh = {}
            for word, output in zip(missing, self._segment_new(missing), strict=True):
                tokens = output.split()
                if not tokens:
                    raise BackendError(f"{self.name} returned an empty segmentation for the word {word!r}")
                fresh[word] = tokens
            self._store(fresh)
            self._new.update(fresh)
            if len(self._new) > self.cache_size:  # nobody drains them: keep memory bounded all the same
                self._new = dict(itertools.islice(self._new.items(), len(self._new) - self.cache_size, None))
            # Read from `fresh` too: storing may have evicted words of this very batch when the cache is small.
            return [cache.get(w) or fresh[w] for w in words]
        return [cache[w] for w in words]

    def _segment_new(self, words: list[str]) -> list[str]:
        raise NotImplementedError

    def _store(self, entries: Mapping[str, list[str]]) -> None:
        self._cache.update(entries)
        excess = len(self._cache) - self.cache_size
        if excess > 0:
            # Drop the oldest tenth at once, so eviction is not paid on every new word.
            drop = max(excess, self.cache_size // 10)
            oldest = (w for w in self._cache if w not in PLACEHOLDER_TOKENS)
            for word in list(itertools.islice(oldest, drop)):
                del self._cache[word]

    def cache_items(self) -> dict[str, str]:
        return {w: " ".join(t) for w, t in self._cache.items()}

    def drain_new(self) -> dict[str, str]:
        new, self._new = self._new, {}
        return {w: " ".join(t) for w, t in new.items()}

    def preload(self, entries: Mapping[str, str]) -> None:
        parsed = {}
        for word, output in entries.items():
            if word in PLACEHOLDER_TOKENS:
                continue
            tokens = output.split()
            if not tokens:
                raise BackendError(f"empty cached segmentation for the word {word!r}")
            parsed[word] = tokens
        self._store(parsed)


class FarasaPySegmenter(CachedSegmenter):
    """The pure-Python Farasa port (PyPI `farasa==0.0.1`, import name `farasa`)."""

    name = "farasa-py-0.0.1"

    def _segment_new(self, words: list[str]) -> list[str]:
        try:
            with warnings.catch_warnings():  # the port's pickle loading uses deprecated importlib.resources calls
                warnings.simplefilter("ignore", DeprecationWarning)
                from farasa import segmentation
                from farasa.arabic_utils import utilities
        except ImportError as error:
            raise BackendError(
                "the offline Farasa port is not importable: `pip install farasa==0.0.1` (and uninstall farasapy, "
                f"which uses the same import name `farasa`): {error}"
            ) from error
        seen = segmentation.hmSeenBefore
        outputs = []
        for word in words:
            if word == FARASA_SEPARATOR:
                # The port deletes `;` from its output (its own internal separator) where the jar keeps it.
                outputs.append(word)
                continue
            # The port memoizes every word it meets in a module dict that never shrinks; our cache is the bounded
            # one, so forget the port's new entries again.
            new_keys = [t for t in utilities.tokenize(word) if t not in seen]
            outputs.append(" ".join(segmentation.segmentLine(word)))
            for key in new_keys:
                seen.pop(key, None)
        return outputs


class FarasaJarSegmenter(CachedSegmenter):
    """QCRI's FarasaSegmenterJar as one long-lived process: one word per input line, one output line per word.

    `command` replaces `java -Dfile.encoding=UTF-8 -jar JAR` (tests use a stand-in script). Words are written from a
    thread while the answers are read, so a large batch cannot deadlock on full pipes.
    """

    WARM_UP_WORD = "اختبار"

    def __init__(self, jar_path: str | os.PathLike | None = None, *, command: list[str] | None = None,
                 cache_size: int = DEFAULT_CACHE_SIZE):
        super().__init__(cache_size)
        self._process: subprocess.Popen[bytes] | None = None
        if command is None:
            if jar_path is None:
                raise BackendError(f"no Farasa jar given (pass its path or set {JAR_ENV})")
            jar = Path(jar_path)
            if not jar.is_file():
                raise BackendError(f"Farasa jar not found: {jar} (from the jar option or {JAR_ENV})")
            java = shutil.which("java")
            if java is None:
                raise BackendError("the Farasa jar needs Java (`java` is not on PATH); install a JRE >= 7, "
                                   "or use the offline port by leaving the jar unset")
            command = [java, "-Dfile.encoding=UTF-8", "-jar", str(jar)]
            self.name = f"farasa-jar:{jar.resolve()}"
        else:
            self.name = f"farasa-jar:{' '.join(command)}"
        self.command = command
        # Each restarted jar process writes its stderr here, for the object's life.
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115  owned by the object, closed when it is freed

    def _start(self) -> subprocess.Popen[bytes]:
        self._stderr.seek(0)
        self._stderr.truncate()
        try:
            self._process = process = subprocess.Popen(self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                                       stderr=self._stderr)
        except OSError as error:
            raise BackendError(f"cannot start the Farasa jar ({' '.join(self.command)}): {error}") from error
        self._exchange(process, [self.WARM_UP_WORD])
        return process

    def _segment_new(self, words: list[str]) -> list[str]:
        return self._exchange(self._process if self._process is not None else self._start(), words)

    def _exchange(self, process: subprocess.Popen[bytes], words: list[str]) -> list[str]:
        stdin, stdout = _pipes(process)
        for word in words:
            if not word or any(ch.isspace() for ch in word):
                raise BackendError(f"the Farasa jar takes single words, not {word!r}")
        payload = "".join(w + "\n" for w in words).encode("utf-8")

        def write() -> None:
            try:
                stdin.write(payload)
                stdin.flush()
            except (BrokenPipeError, OSError):
                pass  # the reader below sees the closed stdout and reports it with the jar's stderr

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        outputs = []
        for word in words:
            line = stdout.readline()
            if not line:
                raise BackendError(f"the Farasa jar stopped before segmenting {word!r}"
                                   + self._abort(process, writer, exiting=True))
            output = line.decode("utf-8").strip()
            if not output:
                # Its answers to the rest of the batch would be read by the next call.
                self._abort(process, writer, exiting=False)
                raise BackendError(f"the Farasa jar returned an empty line for the word {word!r}")
            outputs.append(output)
        writer.join()
        return outputs

    def _abort(self, process: subprocess.Popen[bytes], writer: threading.Thread, exiting: bool) -> str:
        """Stop the process after a failure (the next call starts a new one); returns its exit code and stderr."""
        self._process = None
        try:
            returncode = process.wait(timeout=5 if exiting else 0)
        except subprocess.TimeoutExpired:
            process.kill()
            returncode = process.wait()
        writer.join()
        for stream in _pipes(process):
            with contextlib.suppress(OSError):
                stream.close()
        self._stderr.seek(0)
        tail = self._stderr.read()[-2000:].decode("utf-8", "replace").strip()
        return f" (exit code {returncode})" + (f": {tail}" if tail else "")

    def close(self) -> None:
        """Stop the jar process; the next call starts a new one."""
        if self._process is not None:
            process, self._process = self._process, None
            for stream in _pipes(process):
                with contextlib.suppress(OSError):
                    stream.close()
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def __del__(self):
        self.close()


def _pipes(process: subprocess.Popen[bytes]) -> tuple[IO[bytes], IO[bytes]]:
    """The jar's stdin and stdout, both pipes (FarasaJarSegmenter._start; typeshed has them optional for the Popen
    calls that ask for no pipe)."""
    return cast(IO[bytes], process.stdin), cast(IO[bytes], process.stdout)


def default_segmenter(farasa_jar: str | os.PathLike | None = None) -> CachedSegmenter:
    """The jar backend when a jar is given (argument, else ARABERT_PIPELINE_FARASA_JAR), else the offline port."""
    jar = farasa_jar or os.environ.get(JAR_ENV) or None
    return FarasaJarSegmenter(jar) if jar else FarasaPySegmenter()


def _mark_token(token: str) -> list[str]:
    """One Farasa token → AraBERT pieces: prefixes `X+`, suffixes `+X`, stems bare (ArabertPreprocessor's rules)."""
    pieces = token.split("+")
    marked: list[str] = []
    for i, piece in enumerate(pieces[:-1]):
        if piece == KAF:
            # Kaf is a prefix first in the word or right after a prefix, otherwise a suffix.
            marked.append(piece + "+" if i == 0 or marked[-1].endswith("+") else "+" + piece)
        elif piece in PREFIXES:
            marked.append(piece + "+")
        elif piece in SUFFIXES:
            marked.append("+" + piece)
        else:
            marked.append(piece)
    last = pieces[-1]
    if last:
        marked.append("+" + last if last in SUFFIXES else last)
    return marked


def mark_tokens(tokens: list[str]) -> list[str]:
    """A line's Farasa tokens → its AraBERT v2 pieces; `" ".join` of the result is the segmented line.

    As in the reference, `[` and `]` tokens are dropped, and a placeholder word right after a bracket token (for the
    line's first token: after the line's last token) is written as the placeholder `[رابط]`.
    """
    return [piece for group in mark_token_groups(tokens) for piece in group]


def mark_token_groups(tokens: list[str]) -> list[list[str]]:
    """`mark_tokens`, keeping the pieces of each token apart (an empty list for a dropped bracket)."""
    groups: list[list[str]] = []
    for i, token in enumerate(tokens):
        if token in BRACKETS:
            groups.append([])
        elif token in PLACEHOLDER_WORDS and tokens[i - 1] in BRACKETS:
            groups.append([f"[{token}]"])
        elif "+" not in token:
            groups.append([token])
        else:
            groups.append(_mark_token(token))
    return groups


def desegment_word(word: str) -> str:
    """Undo Farasa's `لل` → `ل+ال` and remove the `+` markers of one word."""
    joined = word.replace("ل+ال+", "لل")
    if "ال+ال" not in word:
        joined = joined.replace("ل+ال", "لل")
    return joined.replace("+", "").replace("للل", "لل")


def desegment(text: str) -> str:
    """AraBERT v2 text → plain words: `و+ س+ يكتب +ون +ها` → `وسيكتبونها`, `ل+ ال+ كتاب` → `للكتاب`."""
    text = text.replace("+ ", "+").replace(" +", "+")
    return " ".join(desegment_word(w) for w in text.split(" "))
