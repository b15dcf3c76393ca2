"""`Embeddings.load(dir)`: the vectors of a `train-embeddings` directory, read without unpickling anything.

    emb = Embeddings.load("runs/ft")
    emb.neighbours("الكتاب", k=5)   # [(word, cosine), ...]; the query is preprocessed as the corpus was
    emb.vector("مكتبتنا")            # fastText: from character n-grams when the form was never seen

Only `vectors.npy` (np.load with allow_pickle=False), `words.txt`, `ngrams.npy` and `arabert_pipeline.json` are read:
gensim's native `vectors.kv` is a pickle, which would run whatever code a planted file holds.
"""
from __future__ import annotations

import hashlib
import math
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from ..artifacts.metadata import read_metadata
from ..errors import ConfigError, InputError
from ..weights.files import open_regular_file

if TYPE_CHECKING:
    from ..preprocess import Preprocessor

TASK = "word-embeddings"
VECTORS_FILE, WORDS_FILE, NGRAMS_FILE = "vectors.npy", "words.txt", "ngrams.npy"
# A words.txt line is `word<TAB>count`; one longer than this is no vocabulary entry. With the line count bounded by
# the table's rows, it also bounds what a damaged or foreign file can make a load hold in memory.
MAX_WORDS_LINE_BYTES = 2**16


def _require(path: Path) -> None:
    if not os.path.lexists(path):
        raise ConfigError(f"{path} not found: the directory is incomplete")


def npy_header(path: Path):
    """(shape, dtype) a .npy file declares, read from its header alone and checked against the file's size: a header
    declaring 10^12 rows over a few bytes is refused before anything is allocated."""
    import numpy as np

    _require(path)
    with open_regular_file(path) as f:
        try:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                shape, _, dtype = np.lib.format.read_array_header_1_0(f)
            elif version == (2, 0):
                shape, _, dtype = np.lib.format.read_array_header_2_0(f)
            else:
                raise ValueError(f".npy format version {version[0]}.{version[1]}")
        except (ValueError, OSError, EOFError) as exc:
            raise ConfigError(f"{path}: not a numeric .npy array ({exc})") from None
        data = os.fstat(f.fileno()).st_size - f.tell()
    if dtype.hasobject:
        raise ConfigError(f"{path}: not a numeric .npy array (it holds Python objects)")
    if math.prod(shape) * dtype.itemsize != data:
        raise ConfigError(f"{path}: its header declares {shape} {dtype} but holds {data:,} bytes of data")
    return shape, dtype


def _matrix_shape(path: Path, rows: int | None, dim: int) -> tuple[int, int]:
    """The (rows, dim) float matrix a .npy file's header declares, or a ConfigError saying what it holds instead."""
    shape, dtype = npy_header(path)
    if len(shape) != 2 or dtype.kind != "f" or shape[1] != dim or (rows is not None and shape[0] != rows):
        want = f"({rows if rows is not None else 'N'}, {dim}) floats"
        raise ConfigError(f"{path}: expected {want}, found {shape} {dtype}")
    return shape


def _load_matrix(path: Path, rows: int | None, dim: int):
    import numpy as np

    shape = _matrix_shape(path, rows, dim)
    with open_regular_file(path) as f:
        try:
            matrix = np.lib.format.read_array(f, allow_pickle=False)
        except (ValueError, OSError, EOFError) as exc:
            raise ConfigError(f"{path}: not a numeric .npy array ({exc})") from None
    if matrix.shape != shape:  # the file changed since its header was read
        raise ConfigError(f"{path}: expected {shape}, found {matrix.shape}")
    if not np.isfinite(matrix).all():
        raise ConfigError(f"{path}: holds NaN or infinite values")
    return matrix.astype(np.float32, copy=False)


def _positive_int(metadata: dict, field: str, path: Path) -> int:
    value = metadata.get(field)
    if type(value) is not int or not 1 <= value <= 2**31:
        raise ConfigError(f"{path}: {field} must be a positive integer, not {value!r}")
    return value


class Embeddings:
    """Word vectors with the preprocessing their corpus had; fastText's n-gram table when the model has one."""

    def __init__(self, words: list[str], vectors, *, preprocessing: str, ngrams=None, min_n: int = 3,
                 max_n: int = 6, source: str | os.PathLike | None = None, words_sha256: str | None = None):
        import numpy as np

        self.words = list(words)
        self.vectors = np.asarray(vectors, dtype=np.float32)
        self.index = {word: i for i, word in enumerate(self.words)}
        self.preprocessing = preprocessing
        self.ngrams = ngrams
        self.min_n, self.max_n = min_n, max_n
        self.source = str(source) if source is not None else "embeddings"
        self.words_sha256 = words_sha256
        self._unit = None
        self._preprocessor: Preprocessor | None = None

    @classmethod
    def load(cls, directory: str | os.PathLike) -> Embeddings:
        directory = Path(directory)
        if not directory.is_dir():
            raise ConfigError(f"{directory} is not a directory of word vectors")
        metadata = read_metadata(directory)
        meta_path = directory / "arabert_pipeline.json"
        if metadata.get("task") != TASK:
            raise ConfigError(f"{meta_path}: not written by `arabert-pipeline train-embeddings` (task is "
                              f"{metadata.get('task')!r})")
        from ..preprocess import PREPROCESSING_NAMES

        preprocessing = metadata.get("preprocessing")
        if preprocessing not in PREPROCESSING_NAMES:
            raise ConfigError(f"{meta_path}: preprocessing must be one of {', '.join(PREPROCESSING_NAMES)}, not "
                              f"{preprocessing!r}")
        dim = _positive_int(metadata, "dim", meta_path)
        # The table's header first: it bounds how many lines words.txt may have before any of them is read.
        rows, _ = _matrix_shape(directory / VECTORS_FILE, None, dim)
        words, words_sha256 = read_words_and_digest(directory / WORDS_FILE, rows, f"rows of {VECTORS_FILE}")
        vectors = _load_matrix(directory / VECTORS_FILE, len(words), dim)
        ngrams, min_n, max_n = None, 3, 6
        if metadata.get("model") == "fasttext":
            min_n, max_n = _positive_int(metadata, "min_n", meta_path), _positive_int(metadata, "max_n", meta_path)
            bucket = _positive_int(metadata, "bucket", meta_path)
            if min_n > max_n:
                raise ConfigError(f"{meta_path}: min_n ({min_n}) exceeds max_n ({max_n})")
            ngrams = _load_matrix(directory / NGRAMS_FILE, bucket, dim)
        return cls(words, vectors, preprocessing=preprocessing, ngrams=ngrams, min_n=min_n, max_n=max_n,
                   source=directory, words_sha256=words_sha256)

    def __len__(self) -> int:
        return len(self.words)

    def __contains__(self, token: str) -> bool:
        return token in self.index

    @property
    def dim(self) -> int:
        return self.vectors.shape[1]

    def vectors_sha256(self) -> str:
        """SHA-256 of the vectors as loaded (float32, row-major): what a reader trained on them is bound to."""
        import numpy as np

        return hashlib.sha256(np.ascontiguousarray(self.vectors, dtype=np.float32).data.cast("B")).hexdigest()

    def query_tokens(self, word: str) -> list[str]:
        """The vocabulary tokens `word` stands for once preprocessed. A Farasa-segmented word is its stem when it has
        one (`والكتاب` → `و+ ال+ كتاب` → `كتاب`): the clitics are the most frequent tokens of the corpus and would
        drown it."""
        from ..preprocess import Preprocessor
        from ..preprocess.preprocessor import SEGMENT_MARKER

        if self._preprocessor is None:
            self._preprocessor = Preprocessor(self.preprocessing)
        tokens = self._preprocessor.preprocess(word).split()
        if not tokens:
            raise InputError(f"{word!r} is empty once preprocessed ({self.preprocessing})")
        stems = [t for t in tokens if not (t.startswith(SEGMENT_MARKER) or t.endswith(SEGMENT_MARKER))]
        return stems or tokens

    def token_vector(self, token: str):
        """The vector of one (preprocessed) token: its row, or for fastText the mean of its character n-grams'
        rows, as gensim's FastTextKeyedVectors computes it."""
        import numpy as np

        row = self.index.get(token)
        if row is not None:
            return self.vectors[row]
        if self.ngrams is None:
            raise InputError(f"{token!r} is not in the vocabulary of {self.source} ({len(self):,} words); a fastText "
                             "model gives vectors to forms it never saw")
        from gensim.models.fasttext import ft_ngram_hashes

        hashes = ft_ngram_hashes(token, self.min_n, self.max_n, self.ngrams.shape[0])
        if not hashes:
            raise InputError(f"{token!r} is too short for any character n-gram of {self.min_n} to {self.max_n}")
        return self.ngrams[np.asarray(hashes)].mean(axis=0)

    def vector(self, word: str):
        """The vector of `word` as typed (preprocessed here): a token's vector, or the mean of its tokens' unit
        vectors when preprocessing leaves several (two stems, or a word split at punctuation)."""
        import numpy as np

        tokens = self.query_tokens(word)
        if len(tokens) == 1:
            return self.token_vector(tokens[0])
        return np.mean([_unit(self.token_vector(t)) for t in tokens], axis=0)

    def neighbours(self, word: str, k: int = 10) -> list[tuple[str, float]]:
        """The `k` vocabulary words nearest to `word` by cosine, the query's own tokens left out."""
        import numpy as np

        if type(k) is not int or k < 1:
            raise ConfigError(f"k must be a positive integer, not {k!r}")
        tokens = self.query_tokens(word)
        query = _unit(self.vector(word))
        if self._unit is None:
            norms = np.linalg.norm(self.vectors, axis=1, keepdims=True)
            self._unit = self.vectors / np.maximum(norms, 1e-12)
        scores = self._unit @ query
        for token in tokens:
            if token in self.index:
                scores[self.index[token]] = -np.inf
        take = min(k, len(self.words) - sum(t in self.index for t in set(tokens)))
        if take <= 0:
            return []
        best = np.argpartition(-scores, take - 1)[:take]
        best = best[np.argsort(-scores[best], kind="stable")]
        return [(self.words[i], float(scores[i])) for i in best]


def _unit(vector):
    import numpy as np

    norm = float(np.linalg.norm(vector))
    return vector / norm if norm > 0 else vector


_WORDS_FILE = re.compile(r"[^\s]+\t\d+(?:\n[^\s]+\t\d+)*\n?")


def read_words(path: Path, rows: int, against: str = "rows of its vectors") -> list[str]:
    """words.txt: `word<TAB>count` lines. Words are whitespace-free by construction (they are split on it)."""
    return read_words_and_digest(path, rows, against)[0]


def read_words_and_digest(path: Path, rows: int, against: str = "rows of its vectors") -> tuple[list[str], str]:
    """words.txt's words and the SHA-256 of the very bytes they were read from. Only a regular file is read, and only
    while it has at most `rows` lines (`against` says whose rows, for the error) of at most MAX_WORDS_LINE_BYTES: a
    10-million-line file is refused after `rows` lines, not held whole first."""
    import numpy as np

    _require(path)
    digest, blocks, lines, tail = hashlib.sha256(), [], 0, 0
    with open_regular_file(path) as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            ends = np.flatnonzero(np.frombuffer(block, dtype=np.uint8) == ord("\n"))
            if ends.size:
                longest = max(tail + int(ends[0]), int(np.diff(ends).max(initial=1)) - 1)
                tail = len(block) - int(ends[-1]) - 1
            else:
                longest = tail = tail + len(block)
            lines += ends.size
            if longest > MAX_WORDS_LINE_BYTES:
                raise InputError(f"a line is longer than {MAX_WORDS_LINE_BYTES:,} bytes: not `word<TAB>count` lines",
                                 path=path)
            if lines + (tail > 0) > rows:  # the files disagree, as when vectors.npy has other rows: ConfigError
                raise ConfigError(f"{path}: more lines than the {rows:,} {against} (expected one line each)")
            digest.update(block)
            blocks.append(block)
    try:
        text = b"".join(blocks).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 ({exc})", path=path) from None
    del blocks
    text_lines = text.split("\n")[:-1] if text.endswith("\n") else text.split("\n")
    if _WORDS_FILE.fullmatch(text):  # the whole file checked at once: a shipped reader reads 124k lines at load
        words = [line.partition("\t")[0] for line in text_lines]
    else:
        for number, line in enumerate(text_lines, 1):
            word, sep, count = line.partition("\t")
            if not word or not sep or not count.isdigit() or any(c.isspace() for c in word):
                raise InputError("expected `word<TAB>count`", path=path, line=number)
        raise InputError("expected `word<TAB>count` lines", path=path)
    if len(set(words)) != len(words):
        raise InputError("a word is listed twice", path=path)
    return words, digest.hexdigest()
