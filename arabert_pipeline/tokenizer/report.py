"""Tokenizer quality on held-out text: tokens per word, words split, [UNK] rate, vocabulary use.

    stats = tokenizer_report([("ours", "runs/tok", None), ("mBERT", "vocab/mbert-cased-vocab.txt", "none")],
                             "corpus/ant-multisource-006.txt.xz")
    print(format_markdown(stats))

Words are counted on the ORIGINAL text (runs of letters, marks and digits), never on the preprocessed text: each
token is attributed, through its preprocessing's offset map, to the original word its first character comes from.
So a Farasa-segmented tokenizer pays for its `و+ ال+` pieces, and tokenizers with different preprocessing are
measured on the same words. Tokens of punctuation (attributed to no word) are left out of tokens per word.
"""
from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

from ..artifacts.paths import portable_path
from ..artifacts.reads import check_input_file
from ..artifacts.writes import atomic_write
from ..errors import InputError

WORD_PATTERN = r"[\p{L}\p{M}\p{N}]+"
DEFAULT_MAX_LINES = 1000
METHOD_NOTE = (
    "Words are counted on the original (unpreprocessed) text as runs of letters, marks and digits, so tokenizers "
    "with different preprocessing are compared on the same words: each token is attributed, through its "
    "preprocessing's offset map, to the original word its first character comes from (a lone `▁` piece counts for "
    "the word after it). Tokens per word = tokens attributed to words / words (punctuation tokens left out); words "
    "split = words that became more than one token (Farasa clitic pieces count); [UNK] = share of all tokens; vocab "
    "used = distinct token ids seen / vocabulary size."
)


@dataclasses.dataclass
class TokenizerStats:
    name: str
    source: str
    preprocessing: str
    model_type: str
    vocab_size: int
    words: int = 0
    word_tokens: int = 0  # tokens attributed to a word
    split_words: int = 0  # words of more than one token
    tokens: int = 0  # all tokens, punctuation included
    unk_tokens: int = 0
    unk_words: int = 0  # words with at least one [UNK]
    distinct_ids: int = 0

    @property
    def fertility(self) -> float:
        return self.word_tokens / self.words if self.words else 0.0

    @property
    def split_rate(self) -> float:
        return self.split_words / self.words if self.words else 0.0

    @property
    def unk_rate(self) -> float:
        return self.unk_tokens / self.tokens if self.tokens else 0.0

    @property
    def unk_word_rate(self) -> float:
        return self.unk_words / self.words if self.words else 0.0

    @property
    def vocab_use(self) -> float:
        return self.distinct_ids / self.vocab_size if self.vocab_size else 0.0

    def as_dict(self) -> dict:
        metrics = {k: getattr(self, k) for k in ("fertility", "split_rate", "unk_rate", "unk_word_rate", "vocab_use")}
        return {**dataclasses.asdict(self), **metrics}


def read_held_out(path: str | os.PathLike, max_lines: int = DEFAULT_MAX_LINES) -> list[str]:
    """The first `max_lines` non-blank lines of a corpus file (.txt, .gz, .xz)."""
    from .train import _nonblank_lines

    path = check_input_file(path)
    lines = []
    for number, data in _nonblank_lines(path):
        try:
            lines.append(data.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise InputError(f"invalid UTF-8 ({exc.reason})", path=path, line=number) from None
        if len(lines) == max_lines:
            break
    if not lines:
        raise InputError("no text (empty or only blank lines)", path=path)
    return lines


def tokenizer_report(tokenizers: list[tuple[str, str, str | None]], text: str | os.PathLike,
                     max_lines: int = DEFAULT_MAX_LINES, batch_size: int = 256,
                     progress: bool = True) -> tuple[list[TokenizerStats], dict]:
    """Stats for each (name, directory / vocab.txt / hub id, preprocessing or None) on the first lines of `text`.

    Returns (stats, description of the text). Preprocessing runs once per distinct preprocessing name.
    """
    import regex

    from ..preprocess import Preprocessor
    from .load import load_tokenizer

    lines = read_held_out(text, max_lines)
    words = [[m.span() for m in regex.finditer(WORD_PATTERN, line)] for line in lines]
    loaded = [(name, source, *load_tokenizer(source, preprocessing)) for name, source, preprocessing in tokenizers]
    prepared: dict[str, list[tuple[str, list[tuple[int, int]]]]] = {}
    for _, _, _, preprocessing in loaded:
        if preprocessing not in prepared:
            preprocessor = Preprocessor(preprocessing)
            prepared[preprocessing] = [preprocessor.preprocess_with_offsets(line)
                                       for line in _bar(lines, progress, f"preprocessing ({preprocessing})")]
    stats = []
    for name, source, tokenizer, preprocessing in loaded:
        stats.append(_measure(name, portable_path(source), tokenizer, preprocessing, prepared[preprocessing], lines,
                              words, batch_size))
    # Paths as they leave this machine: a report is committed (notebooks/results/).
    described = {"text": portable_path(text), "lines": len(lines), "words": sum(len(w) for w in words)}
    return stats, described


def _measure(name, source, tokenizer, preprocessing, prepared, lines, words, batch_size) -> TokenizerStats:
    model = tokenizer.backend_tokenizer.model.__class__.__name__.lower()
    stats = TokenizerStats(name, source, preprocessing, model, len(tokenizer))
    unk_id = tokenizer.unk_token_id
    seen: set[int] = set()
    for start in range(0, len(lines), batch_size):
        chunk = prepared[start:start + batch_size]
        encoded = tokenizer([out for out, _ in chunk], add_special_tokens=False, return_offsets_mapping=True,
                            verbose=False)
        for i, (ids, offsets) in enumerate(zip(encoded["input_ids"], encoded["offset_mapping"], strict=True)):
            original = lines[start + i]
            to_original = chunk[i][1]
            word_of_char = [-1] * len(original)
            for w, (a, b) in enumerate(words[start + i]):
                word_of_char[a:b] = [w] * (b - a)
            per_word = [0] * len(words[start + i])
            unk_in_word = [False] * len(per_word)
            for token_id, (s, e) in zip(ids, offsets, strict=True):
                seen.add(token_id)
                stats.tokens += 1
                is_unk = token_id == unk_id
                stats.unk_tokens += is_unk
                word = _first_word(word_of_char, to_original, s, e)
                if word >= 0:
                    per_word[word] += 1
                    unk_in_word[word] |= is_unk
            stats.words += len(per_word)
            stats.word_tokens += sum(per_word)
            stats.split_words += sum(1 for n in per_word if n > 1)
            stats.unk_words += sum(unk_in_word)
    stats.distinct_ids = len(seen)
    return stats


def _first_word(word_of_char: list[int], to_original: list[tuple[int, int]], start: int, end: int) -> int:
    """The original word that the first word character of preprocessed span [start, end) comes from, else -1."""
    for position in range(start, end):
        a, b = to_original[position]
        for char in range(a, b):
            if word_of_char[char] >= 0:
                return word_of_char[char]
    return -1


def _bar(items, enabled: bool, desc: str):
    from tqdm.auto import tqdm

    return tqdm(items, disable=not enabled, desc=desc, unit=" lines", file=sys.stderr)


def format_markdown(stats: list[TokenizerStats], described: dict) -> str:
    rows = [
        "| tokenizer | preprocessing | model | vocab | tokens/word | words split | [UNK] | words with [UNK] "
        "| vocab used |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for s in stats:
        rows.append(
            f"| {s.name} | {s.preprocessing} | {s.model_type} | {s.vocab_size:,} | {s.fertility:.3f} | "
            f"{100 * s.split_rate:.1f}% | {100 * s.unk_rate:.2f}% | {100 * s.unk_word_rate:.2f}% | "
            f"{100 * s.vocab_use:.1f}% |"
        )
    head = (f"Held-out text: `{described['text']}`, first {described['lines']:,} non-blank lines, "
            f"{described['words']:,} words.")
    return "\n".join([head, "", *rows, "", METHOD_NOTE, ""])


def write_report(stats: list[TokenizerStats], described: dict, prefix: str | os.PathLike) -> list[Path]:
    """PREFIX.md (the table) and PREFIX.json (the counts and metrics)."""
    md, js = Path(f"{prefix}.md"), Path(f"{prefix}.json")
    # Nested: a failed write of either (a full disk) leaves neither, not a table without its numbers.
    with atomic_write(md) as f_md, atomic_write(js) as f_js:
        f_md.write(format_markdown(stats, described))
        json.dump({**described, "method": METHOD_NOTE, "tokenizers": [s.as_dict() for s in stats]}, f_js,
                  ensure_ascii=False, indent=2)
        f_js.write("\n")
    return [md, js]
