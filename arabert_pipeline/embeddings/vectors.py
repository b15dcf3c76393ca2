"""`Embeddings.load(dir)`: the vectors of a `train-embeddings` directory, read without unpickling anything.

    emb = Embeddings.load("runs/ft")
    emb.neighbours("الكتاب", k=5)   # [(word, cosine), ...]; the query is preprocessed as the corpus was
    emb.vector("مكتبتنا")            # fastText: from character n-grams when the form was never seen

Only `vectors.npy` (np.load with allow_pickle=False), `words.txt`, `ngrams.npy` and `arabert_pipeline.json` are read:
gensim's native `vectors.kv` is a pickle, which would run whatever code a planted file holds.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

from ..artifacts import read_metadata
from ..errors import ConfigError, InputError

TASK = "word-embeddings"
VECTORS_FILE, WORDS_FILE, NGRAMS_FILE = "vectors.npy", "words.txt", "ngrams.npy"


def _load_matrix(path: Path, rows: int | None, dim: int):
    import numpy as np

    if not path.is_file():
        raise ConfigError(f"{path} not found: the directory is incomplete")
    try:
        matrix = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise ConfigError(f"{path}: not a numeric .npy array ({exc})") from None
    if matrix.ndim != 2 or matrix.dtype.kind != "f" or matrix.shape[1] != dim or (rows is not None
                                                                                  and matrix.shape[0] != rows):
        want = f"({rows if rows is not None else 'N'}, {dim}) floats"
        raise ConfigError(f"{path}: expected {want}, found {matrix.shape} {matrix.dtype}")
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
                 max_n: int = 6, source: str | os.PathLike | None = None):
        import numpy as np

        self.words = list(words)
        self.vectors = np.asarray(vectors, dtype=np.float32)
        self.index = {word: i for i, word in enumerate(self.words)}
        self.preprocessing = preprocessing
        self.ngrams = ngrams
        self.min_n, self.max_n = min_n, max_n
        self.source = str(source) if source is not None else "embeddings"
        self._unit = None
        self._preprocessor = None

    @classmethod
    def load(cls, directory: str | os.PathLike) -> "Embeddings":
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
        words = read_words(directory / WORDS_FILE)
        vectors = _load_matrix(directory / VECTORS_FILE, len(words), dim)
        ngrams, min_n, max_n = None, 3, 6
        if metadata.get("model") == "fasttext":
            min_n, max_n = _positive_int(metadata, "min_n", meta_path), _positive_int(metadata, "max_n", meta_path)
            bucket = _positive_int(metadata, "bucket", meta_path)
            if min_n > max_n:
                raise ConfigError(f"{meta_path}: min_n ({min_n}) exceeds max_n ({max_n})")
            ngrams = _load_matrix(directory / NGRAMS_FILE, bucket, dim)
        return cls(words, vectors, preprocessing=preprocessing, ngrams=ngrams, min_n=min_n, max_n=max_n,
                   source=directory)

    def __len__(self) -> int:
        return len(self.words)

    def __contains__(self, token: str) -> bool:
        return token in self.index

    @property
    def dim(self) -> int:
        return self.vectors.shape[1]

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


def read_words(path: Path) -> list[str]:
    """words.txt: `word<TAB>count` lines. Words are whitespace-free by construction (they are split on it)."""
    try:
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path} not found: the directory is incomplete") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 ({exc})", path=path) from None
    lines = text.split("\n")[:-1] if text.endswith("\n") else text.split("\n")
    if _WORDS_FILE.fullmatch(text):  # the whole file checked at once: a shipped reader reads 124k lines at load
        words = [line.partition("\t")[0] for line in lines]
    else:
        for number, line in enumerate(lines, 1):
            word, sep, count = line.partition("\t")
            if not word or not sep or not count.isdigit() or any(c.isspace() for c in word):
                raise InputError("expected `word<TAB>count`", path=path, line=number)
        raise InputError("expected `word<TAB>count` lines", path=path)
    if len(set(words)) != len(words):
        raise InputError("a word is listed twice", path=path)
    return words
