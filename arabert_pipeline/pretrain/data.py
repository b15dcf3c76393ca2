"""Pretraining data: tokenize the corpus once into a memory-mapped cache, pack it into sequences, plan batches.

The corpus format is the project's: UTF-8, one paragraph per line, a blank line between documents (.txt, .txt.gz,
.txt.xz); every file starts a new document. Tokenization runs once per (corpus content, tokenizer) pair; the cache
holds four arrays:

- `tokens.bin`       all token ids, uint16 when the vocabulary fits, else uint32, lines concatenated;
- `word_starts.bin`  uint8, 1 where a token starts a whitespace-delimited word (for whole-word masking);
- `line_starts.npy`  token offset of every line, plus the total (so line i is tokens[line_starts[i]:line_starts[i+1]]);
- `doc_lines.npy`    index of the first line of every document, plus the line count.

Packing: a training sequence is `[CLS] tokens [SEP]` filled with exactly max_seq_length - 2 consecutive tokens of one
document (a paragraph may continue in the next sequence); only the last sequence of a document is shorter. Batches
are token budgets (batch_size × max_seq_length) over length-sorted windows, so the short tails of documents share
batches with each other instead of being padded to full length. With NSP, sequences are `[CLS] A [SEP] B [SEP]` where
A and B are runs of whole paragraphs (BERT's "sentences"; a paragraph longer than a sequence is cut into pieces, and
a run of a single paragraph is cut at a random token) and B is, half of the time, a span of another document
(BERT's `create_pretraining_data` recipe, drawn anew each epoch).

Everything random here is a function of (seed, epoch, batch index), so a resumed run sees exactly the same data.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import chain
from pathlib import Path

import numpy as np

from ..artifacts.metadata import METADATA_FILE, read_metadata, sidecar_path
from ..artifacts.reads import CORPUS_READ_ERRORS, check_input_file, decompressed, read_json_file
from ..artifacts.writes import naming_io_errors
from ..errors import ConfigError, InputError
from ..weights.files import file_digest

CACHE_FORMAT = 1
TOKENIZE_BATCH_LINES = 4096
# Every code point for which str.isspace() is true.
WHITESPACE = np.array([c for c in range(0x3001) if chr(c).isspace()], dtype=np.uint32)


# --------------------------------------------------------------------------------------------- corpus files


def check_corpus_preprocessing(corpus: list[str], tokenizer_dir: str) -> str:
    """The tokenizer's preprocessing name, after checking that every corpus file was preprocessed the same way."""
    expected = read_metadata(tokenizer_dir).get("preprocessing")
    if not expected:
        raise ConfigError(f"{Path(tokenizer_dir) / METADATA_FILE} has no 'preprocessing' field")
    for path in corpus:
        check_input_file(path, "corpus file")
        sidecar = sidecar_path(path)
        if not sidecar.exists():
            if expected == "none":
                continue
            raise ConfigError(
                f"{path}: no {sidecar.name} beside it, so its preprocessing is unknown, and the tokenizer "
                f"{tokenizer_dir} expects {expected!r} text. Run `arabert-pipeline preprocess {path} -o OUT "
                f"--preprocessing {expected}` and "
                f"pretrain on OUT (or, if the file is already {expected!r} text, write {{\"preprocessing\": "
                f"\"{expected}\"}} to {sidecar})."
            )
        found = read_json_file(sidecar).get("preprocessing")
        if found != expected:
            raise ConfigError(
                f"{path} was preprocessed with {found!r} (see {sidecar.name}) but the tokenizer {tokenizer_dir} "
                f"expects {expected!r}: preprocess the corpus with --preprocessing {expected} or use a matching "
                "tokenizer"
            )
    return expected


def read_lines(paths: list[str], progress) -> Iterator[str | None]:
    """Every non-blank line, stripped; None marks a document boundary (a blank line or the start of a file)."""
    for path in map(Path, paths):
        with open(path, "rb") as raw, decompressed(path, raw) as stream:
            done = number = 0
            yield None
            try:
                for number, data in enumerate(stream, 1):
                    try:
                        line = data.decode("utf-8").strip()
                    except UnicodeDecodeError as exc:
                        raise InputError(f"invalid UTF-8 ({exc.reason} at byte {exc.start})", path=path,
                                         line=number) from exc
                    yield line or None
                    if number % 1024 == 0:
                        position = raw.tell()
                        progress.update(position - done)
                        done = position
            except CORPUS_READ_ERRORS as exc:
                raise InputError(f"cannot read: {exc}", path=path, line=number + 1) from exc
            progress.update(path.stat().st_size - done)


def cache_key(corpus: list[str], tokenizer) -> str:
    """Depends on the corpus bytes and the tokenizer's full serialisation, not on file names or dates."""
    digest = hashlib.sha256(f"format {CACHE_FORMAT}\n".encode())
    digest.update(hashlib.sha256(tokenizer.backend_tokenizer.to_str().encode()).digest())
    for path in corpus:
        digest.update(file_digest(path).encode())
    return digest.hexdigest()[:24]


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "arabert_pipeline" / "pretrain-tokens"


# --------------------------------------------------------------------------------------------- tokenization


def word_start_flags(lines: list[str], encodings, lengths: np.ndarray) -> np.ndarray:
    """1 where a token starts a whitespace-delimited word, computed from character offsets.

    A token starts a word when it is the first of its line, or when the character before it (or its own first
    character, for a `▁x` piece whose span covers the space) is whitespace, unless the previous token was only a
    word-start mark: a lone `▁` piece, whose span is a space, nothing, or (in a WhitespaceSplit + Metaspace
    tokenizer) the same character as the next piece. This works for WordPiece (punctuation split off by the
    pre-tokenizer stays in its space-delimited word) and SentencePiece alike.
    """
    text = "\n".join(lines)
    space = np.isin(np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32), WHITESPACE)
    space = np.append(space, True)  # so an empty span at the very end indexes safely
    line_base = np.cumsum([0] + [len(line) + 1 for line in lines[:-1]])
    offsets = np.fromiter(
        chain.from_iterable(chain.from_iterable(e.offsets for e in encodings)), dtype=np.int64, count=2 * lengths.sum()
    ).reshape(-1, 2)
    base = np.repeat(line_base, lengths)
    starts, ends = offsets[:, 0] + base, offsets[:, 1] + base
    first_in_line = np.zeros(len(starts), dtype=bool)
    first_in_line[(np.cumsum(lengths) - lengths)[lengths > 0]] = True
    own_space = space[starts]
    mark_only = (ends == starts) | (own_space & (ends - starts == 1))
    after_space = space[np.maximum(starts - 1, 0)] | own_space
    flags = after_space.copy()
    flags[1:] &= (starts[1:] >= ends[:-1]) & ~mark_only[:-1]
    return (flags | first_in_line).astype(np.uint8)


def tokenize_corpus(corpus: list[str], tokenizer, cache_dir: Path, key: str | None = None,
                    progress: bool = True) -> Path:
    """Tokenize `corpus` into `cache_dir/<cache_key>` (once) and return that directory."""
    from tqdm.auto import tqdm

    key = key or cache_key(corpus, tokenizer)
    target = cache_dir / key
    if (target / "meta.json").exists():
        return target
    cache_dir.mkdir(parents=True, exist_ok=True)
    dtype = np.uint16 if len(tokenizer) <= np.iinfo(np.uint16).max + 1 else np.uint32
    backend = tokenizer.backend_tokenizer
    tmp = Path(tempfile.mkdtemp(dir=cache_dir, prefix=f".{key}.", suffix=".tmp"))
    try:
        line_lengths: list[np.ndarray] = []
        doc_lines = [0]  # first line of each document, counting only lines that have tokens
        n_lines = 0
        starts_document = False
        total_bytes = sum(Path(p).stat().st_size for p in corpus)
        bar = tqdm(total=total_bytes, unit="B", unit_scale=True, desc="tokenizing corpus", disable=not progress)
        with naming_io_errors(cache_dir), open(tmp / "tokens.bin", "wb") as tokens_file, \
                open(tmp / "word_starts.bin", "wb") as words_file, bar:
            batch: list[str] = []
            new_doc: list[bool] = []

            def flush() -> None:
                nonlocal n_lines, starts_document
                encodings = backend.encode_batch(batch, add_special_tokens=False)
                lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(encodings))
                ids = np.fromiter(chain.from_iterable(e.ids for e in encodings), dtype=dtype, count=lengths.sum())
                tokens_file.write(ids.tobytes())
                words_file.write(word_start_flags(batch, encodings, lengths).tobytes())
                for first, length in zip(new_doc, lengths, strict=True):
                    starts_document |= first
                    if length:  # a line without tokens is dropped; its document boundary moves to the next line
                        if starts_document and n_lines > doc_lines[-1]:
                            doc_lines.append(n_lines)
                        starts_document = False
                        n_lines += 1
                line_lengths.append(lengths[lengths > 0])
                batch.clear()
                new_doc.clear()

            boundary = True
            for line in read_lines(corpus, bar):
                if line is None:
                    boundary = True
                    continue
                batch.append(line)
                new_doc.append(boundary)
                boundary = False
                if len(batch) == TOKENIZE_BATCH_LINES:
                    flush()
            if batch:
                flush()
        lengths = np.concatenate(line_lengths) if line_lengths else np.zeros(0, dtype=np.int64)
        line_starts = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        doc_lines.append(n_lines)
        if n_lines == 0:
            raise InputError("the corpus holds no tokens (empty files or only blank lines)", path=", ".join(corpus))
        np.save(tmp / "line_starts.npy", line_starts)
        np.save(tmp / "doc_lines.npy", np.array(doc_lines, dtype=np.int64))
        meta = {
            "format": CACHE_FORMAT, "key": key, "dtype": np.dtype(dtype).name, "tokens": int(line_starts[-1]),
            "lines": n_lines, "documents": len(doc_lines) - 1, "corpus": [str(Path(p).resolve()) for p in corpus],
            "vocab_size": len(tokenizer),
        }
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2), encoding="utf-8")
        try:
            os.replace(tmp, target)
        except OSError:  # another process finished the same cache first; its copy is identical
            if not (target / "meta.json").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


@dataclass
class TokenStore:
    """The memory-mapped token cache of one (corpus, tokenizer) pair."""

    directory: Path
    tokens: np.ndarray
    word_starts: np.ndarray
    line_starts: np.ndarray
    doc_lines: np.ndarray
    meta: dict

    @classmethod
    def open(cls, directory: Path) -> TokenStore:
        meta = json.loads((directory / "meta.json").read_text(encoding="utf-8"))
        return cls(
            directory=directory,
            tokens=np.memmap(directory / "tokens.bin", dtype=meta["dtype"], mode="r"),
            word_starts=np.memmap(directory / "word_starts.bin", dtype=np.uint8, mode="r"),
            line_starts=np.load(directory / "line_starts.npy"),
            doc_lines=np.load(directory / "doc_lines.npy"),
            meta=meta,
        )

    def __reduce__(self):
        # Reopened by path in the process that unpickles it (a loader worker), instead of copying the memory maps.
        return TokenStore.open, (self.directory,)

    @property
    def n_documents(self) -> int:
        return len(self.doc_lines) - 1

    def document_span(self, doc: np.ndarray | int) -> tuple:
        """(first token, end token) of documents."""
        return self.line_starts[self.doc_lines[doc]], self.line_starts[self.doc_lines[np.asarray(doc) + 1]]


# --------------------------------------------------------------------------------------------- packing


@dataclass
class Chunks:
    """Packed sequences as token ranges of the store: sequence i is tokens[start[i] : start[i] + length[i]]."""

    start: np.ndarray
    length: np.ndarray
    doc: np.ndarray

    def subset(self, keep: np.ndarray) -> Chunks:
        return Chunks(self.start[keep], self.length[keep], self.doc[keep])

    def __len__(self) -> int:
        return len(self.start)


def pack_contiguous(store: TokenStore, content: int) -> Chunks:
    """Cut each document into runs of exactly `content` tokens (the last run of a document is the remainder)."""
    doc_start, doc_end = store.document_span(np.arange(store.n_documents))
    sizes = doc_end - doc_start
    per_doc = -(-sizes // content)
    doc = np.repeat(np.arange(store.n_documents), per_doc)
    rank = np.arange(per_doc.sum()) - np.repeat(np.cumsum(per_doc) - per_doc, per_doc)
    start = doc_start[doc] + rank * content
    length = np.minimum(content, doc_end[doc] - start)
    return Chunks(start.astype(np.int64), length.astype(np.int64), doc.astype(np.int64))


def pack_whole_lines(store: TokenStore, content: int) -> Chunks:
    """Greedy runs of whole consecutive lines of one document, each at most `content` tokens (for NSP pairs)."""
    starts, lengths, docs = [], [], []
    for doc in range(store.n_documents):
        run_start, run_length = None, 0
        for line in range(store.doc_lines[doc], store.doc_lines[doc + 1]):
            begin, end = int(store.line_starts[line]), int(store.line_starts[line + 1])
            while end - begin > 0:
                piece = min(end - begin, content)
                if run_start is not None and run_length + piece > content:
                    starts.append(run_start)
                    lengths.append(run_length)
                    docs.append(doc)
                    run_start, run_length = None, 0
                if run_start is None:
                    run_start = begin
                run_length += piece
                begin += piece
        if run_start is not None:
            starts.append(run_start)
            lengths.append(run_length)
            docs.append(doc)
    return Chunks(np.array(starts, dtype=np.int64), np.array(lengths, dtype=np.int64), np.array(docs, dtype=np.int64))


def split_eval_documents(store: TokenStore, chunks: Chunks, eval_sequences: int) -> np.ndarray:
    """A fixed (seed-independent) set of held-out documents holding about `eval_sequences` sequences.

    At most a tenth of the documents are held out, and at least one is, so a tiny corpus still trains.
    """
    if store.n_documents < 2:
        raise InputError(
            f"the corpus has {store.n_documents} document; at least 2 are needed (one is held out for evaluation). "
            "Documents are separated by blank lines.", path=", ".join(store.meta["corpus"]),
        )
    per_doc = np.bincount(chunks.doc, minlength=store.n_documents)
    order = np.random.default_rng(0).permutation(store.n_documents)
    needed = np.searchsorted(np.cumsum(per_doc[order]), eval_sequences) + 1
    return np.sort(order[: max(1, min(needed, store.n_documents // 10))])


# A batch's padded width is rounded up to this multiple and its rows filled up to the token budget, so training
# sees a few dozen distinct tensor shapes instead of thousands. Each new shape makes the CPU kernels (oneDNN's
# bf16 matmuls above all) allocate native memory that is never given back: with exact shapes the resident memory of a
# mini run grew by ~5-8 MB per step until the OOM killer stopped it (benchmarks/bench_pretrain_memory.py measures it).
WIDTH_MULTIPLE = 32
POSITIONS_MULTIPLE = 64  # the number of predicted positions is padded likewise (labels IGNORE)


@dataclass(frozen=True)
class BatchShape:
    """The padded (rows × width) of a batch whose longest sequence has `longest` tokens."""

    token_budget: int
    max_width: int
    # Every batch carries its attention mask, padded or not: for a compiled model, a batch without one is another
    # graph to trace (tens of seconds for a base-size model on a GPU).
    always_masked: bool = False

    def width(self, longest: int) -> int:
        return max(longest, min(-(-longest // WIDTH_MULTIPLE) * WIDTH_MULTIPLE, self.max_width))

    def rows(self, longest: int) -> int:
        """How many sequences of at most `longest` tokens a batch holds."""
        return max(1, self.token_budget // self.width(longest))

    def padded(self, rows: int, longest: int) -> tuple[int, int]:
        return max(rows, self.rows(longest)), self.width(longest)

    @classmethod
    def for_config(cls, config) -> BatchShape:
        # Compiled DeBERTa: its attention builds a full mask when given none, so one costs nothing. BERT's SDPA runs
        # its flash kernel only without a mask, worth one more compilation per run. The trainer gives the compile
        # setting resolved for its device; an unresolved None is a CPU's (not compiled).
        always_masked = bool(config.compile) and config.architecture == "deberta-v2"
        return cls(config.batch_size * config.max_seq_length, config.max_seq_length, always_masked=always_masked)


IGNORE = -100  # the label of a padding row (PyTorch's default ignore_index)


def padded_shape(sequences, shape: BatchShape | None) -> tuple[int, int]:
    """(rows, width) of the batch of `sequences` (anything with `input_ids`); exact when `shape` is None."""
    rows, longest = len(sequences), max(len(s.input_ids) for s in sequences)
    return shape.padded(rows, longest) if shape is not None else (rows, longest)


def needs_attention_mask(shape: BatchShape | None, lengths: np.ndarray, width: int) -> bool:
    """A batch carries an attention mask when a row is padded, or always (BatchShape.always_masked). Without one,
    SDPA runs its fastest kernel."""
    return bool(shape is not None and shape.always_masked or (lengths < width).any())


def row_lengths(sequences, rows: int) -> np.ndarray:
    """Attended length of each of `rows` rows. A padding row attends to its first position only: a row with no
    attended position would make SDPA's softmax NaN, and NaN × 0 still poisons the gradients."""
    lengths = np.ones(rows, dtype=np.int64)
    lengths[: len(sequences)] = [len(s.input_ids) for s in sequences]
    return lengths


def plan_batches(lengths: np.ndarray, shape: BatchShape, rng: np.random.Generator) -> list[np.ndarray]:
    """Shuffled batches of sequence indices whose padded shape fits the token budget.

    Sorting by length only inside windows of a few hundred batches keeps the order random while the rows of
    a batch have nearly equal lengths, so padding is rare.
    """
    order = rng.permutation(len(lengths))
    window = max(1, 64 * shape.token_budget // int(lengths.max(initial=1)))
    batches: list[np.ndarray] = []
    for begin in range(0, len(order), window):
        part = order[begin : begin + window]
        part = part[np.argsort(-lengths[part], kind="stable")]
        i = 0
        while i < len(part):
            rows = shape.rows(int(lengths[part[i]]))
            batches.append(part[i : i + rows])
            i += rows
    return [batches[i] for i in rng.permutation(len(batches))]


# --------------------------------------------------------------------------------------------- examples


@dataclass
class Example:
    """One packed sequence, special tokens included, before masking."""

    input_ids: np.ndarray  # int64
    word_starts: np.ndarray  # bool; True at special positions too
    special: np.ndarray  # bool; the [CLS]/[SEP] positions added by packing (never masked)
    token_type_ids: np.ndarray | None = None
    next_sentence_label: int | None = None  # 0: B follows A, 1: B is from another document (HF convention)


@dataclass
class SpecialIds:
    cls: int
    sep: int
    pad: int
    mask: int

    @classmethod
    def from_tokenizer(cls, tokenizer) -> SpecialIds:
        ids = {name: getattr(tokenizer, f"{name}_token_id") for name in ("cls", "sep", "pad", "mask")}
        missing = [name for name, value in ids.items() if value is None]
        if missing:
            raise ConfigError(f"the tokenizer has no {', '.join(f'[{m.upper()}]' for m in missing)} token")
        return cls(**ids)


class PretrainingData:
    """Training and held-out sequences of a token store, with the per-epoch batch plan."""

    def __init__(self, store: TokenStore, specials: SpecialIds, max_seq_length: int, token_budget: int,
                 eval_sequences: int, seed: int, nsp: bool = False):
        self.store, self.specials, self.nsp, self.seed = store, specials, nsp, seed
        self.shape = BatchShape(token_budget, max_seq_length)
        self.content = max_seq_length - (3 if nsp else 2)
        chunks = pack_whole_lines(store, self.content) if nsp else pack_contiguous(store, self.content)
        self.eval_docs = split_eval_documents(store, chunks, eval_sequences)
        held_out = np.isin(chunks.doc, self.eval_docs)
        self.train = chunks.subset(~held_out)
        self.eval = chunks.subset(np.flatnonzero(held_out)[:eval_sequences])
        self.train_docs = np.setdiff1d(np.arange(store.n_documents), self.eval_docs)
        self._eval_doc_set = set(self.eval_docs.tolist())

    @property
    def specials_per_sequence(self) -> int:
        return 3 if self.nsp else 2

    @property
    def train_tokens(self) -> int:
        """Tokens per epoch, special tokens included (what the model reads)."""
        return int(self.train.length.sum() + len(self.train) * self.specials_per_sequence)

    def epoch_batches(self, epoch: int) -> list[np.ndarray]:
        """The epoch's plan, computed anew (the training engine keeps the plans it uses: Engine.plan)."""
        lengths = self.train.length + self.specials_per_sequence
        return plan_batches(lengths, self.shape, np.random.default_rng([self.seed, epoch, 0]))

    def eval_batches(self) -> list[np.ndarray]:
        lengths = self.eval.length + self.specials_per_sequence
        return plan_batches(lengths, self.shape, np.random.default_rng([0, 0, 1]))

    def examples(self, chunks: Chunks, indices: np.ndarray, rng: np.random.Generator) -> list[Example]:
        if self.nsp:
            return [self.nsp_example(chunks, int(i), rng) for i in indices]
        return [self.single_example(int(chunks.start[i]), int(chunks.length[i])) for i in indices]

    def single_example(self, start: int, length: int) -> Example:
        s = self.specials
        ids = np.empty(length + 2, dtype=np.int64)
        ids[0], ids[1:-1], ids[-1] = s.cls, self.store.tokens[start : start + length], s.sep
        words = np.ones(length + 2, dtype=bool)
        words[1:-1] = self.store.word_starts[start : start + length]
        special = np.zeros(length + 2, dtype=bool)
        special[[0, -1]] = True
        return Example(ids, words, special)

    def nsp_example(self, chunks: Chunks, i: int, rng: np.random.Generator) -> Example:
        """BERT's pair recipe: A = the first paragraphs of the run, B = the rest or (50%) another document's span."""
        start, length, doc = int(chunks.start[i]), int(chunks.length[i]), int(chunks.doc[i])
        lines = self.store.line_starts
        cuts = lines[np.searchsorted(lines, start, side="right") : np.searchsorted(lines, start + length)]
        if len(cuts):
            a_end = int(cuts[rng.integers(len(cuts))])
        else:  # one paragraph (BERT's segments are sentences, ours paragraphs): cut it at a random token
            a_end = start + int(rng.integers(1, length)) if length > 1 else start + 1
        random_next = a_end == start + length or rng.random() < 0.5
        a = (start, a_end)
        b = self.random_span(doc, self.content - (a_end - start), rng) if random_next else (a_end, start + length)
        a, b = truncate_pair(a, b, self.content, rng)
        return self.pair_example(a, b, label=int(random_next))

    def random_span(self, doc: int, size: int, rng: np.random.Generator) -> tuple[int, int]:
        """`size` tokens (at least one whole line, as BERT) from a random line of another document of the same split."""
        pool = self.eval_docs if doc in self._eval_doc_set else self.train_docs
        other = doc
        for _ in range(10):  # BERT's retry: a random document that differs from the current one
            other = int(pool[rng.integers(len(pool))])
            if other != doc:
                break
        first, last = self.store.doc_lines[other], self.store.doc_lines[other + 1]
        line = int(rng.integers(first, last))
        begin, line_end = int(self.store.line_starts[line]), int(self.store.line_starts[line + 1])
        end = int(self.store.line_starts[last])
        return begin, min(end, begin + max(size, min(line_end - begin, self.content)))

    def pair_example(self, a: tuple[int, int], b: tuple[int, int], label: int) -> Example:
        s, tokens, words = self.specials, self.store.tokens, self.store.word_starts
        len_a, len_b = a[1] - a[0], b[1] - b[0]
        n = len_a + len_b + 3
        ids = np.empty(n, dtype=np.int64)
        ids[0], ids[1 : 1 + len_a], ids[1 + len_a] = s.cls, tokens[a[0] : a[1]], s.sep
        ids[2 + len_a : -1], ids[-1] = tokens[b[0] : b[1]], s.sep
        flags = np.ones(n, dtype=bool)
        flags[1 : 1 + len_a], flags[2 + len_a : -1] = words[a[0] : a[1]], words[b[0] : b[1]]
        special = np.zeros(n, dtype=bool)
        special[[0, 1 + len_a, n - 1]] = True
        types = np.zeros(n, dtype=np.int64)
        types[2 + len_a :] = 1
        return Example(ids, flags, special, types, label)


def truncate_pair(a: tuple[int, int], b: tuple[int, int], budget: int, rng: np.random.Generator):
    """BERT's truncate_seq_pair: trim the longer segment, from its front or back at random, until both fit."""
    (a0, a1), (b0, b1) = a, b
    while (a1 - a0) + (b1 - b0) > budget:
        if a1 - a0 > b1 - b0:
            a0, a1 = (a0 + 1, a1) if rng.random() < 0.5 else (a0, a1 - 1)
        else:
            b0, b1 = (b0 + 1, b1) if rng.random() < 0.5 else (b0, b1 - 1)
    return (a0, a1), (b0, b1)
