"""Words ↔ model tokens through the model's preprocessing, for tagging.

A sentence is an original text and the character spans of its words: a CoNLL sentence's words joined by single spaces,
or, for raw text (`Pipeline(task="ner")`), the words `word_spans` finds (runs of letters, marks and digits; every other
non-space character a word of its own, as ANERcorp splits punctuation off). The text goes through the model's
preprocessing with its offset map (finetuning/offsets.py), the preprocessed text is tokenized with character offsets,
and every token is given to the original word its first character comes from.

Labels sit on the first sub-token of each word; the word's other tokens are ignored by the loss (-100) and its
prediction is read from that first token, as Hugging Face's token-classification recipe does. With Farasa
segmentation (arabertv2) a word becomes several space-separated segments — `وسيكتبونها` → `و+ س+ يكتب +ون +ها` — and
all of their tokens belong to the one original word: the word's tag is carried by its first token, the `و+` clitic's,
and the stem and suffixes are not labelled. A word the preprocessing deletes entirely (an emoji, a character outside
its alphabet) has no token: it is not trained on (counted) and is predicted O.

A sentence longer than max_seq_length tokens is cut into pieces at word boundaries (a single word longer than that is
cut inside, its first token kept), each piece framed as the tokenizer frames one text ([CLS] … [SEP]: the template of
its tokenizer.json, as QA's and classification's calls of the tokenizer frame theirs; tokenizer_config.json's
`cls_token` / `sep_token` names are not read), so every word is tagged.
"""
from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Sequence

import regex

from ..errors import ConfigError
from ..finetuning.offsets import preprocess_aligned

WORD = regex.compile(r"\w+|[^\w\s]")
_JOINERS = "\u200c\u200d"  # ZWNJ, ZWJ: word characters for `regex`
IGNORE = -100


def word_spans(text: str) -> list[tuple[int, int]]:
    """The words of raw text: (start, end) of each run of word characters, and of each other non-space character.
    Word characters include the zero-width joiners (Persian writes ZWNJ inside words); at a word's edge one joins
    nothing, so it is left out of the word (and a joiner alone is no word)."""
    spans = []
    for match in WORD.finditer(text):
        start, end = match.span()
        while start < end and text[start] in _JOINERS:
            start += 1
        while end > start and text[end - 1] in _JOINERS:
            end -= 1
        if start < end:
            spans.append((start, end))
    return spans


def joined(words: Sequence[str]) -> tuple[str, list[tuple[int, int]]]:
    """Words joined by spaces, and each word's span in that text."""
    spans, position = [], 0
    for word in words:
        spans.append((position, position + len(word)))
        position += len(word) + 1
    return " ".join(words), spans


@dataclasses.dataclass
class Piece:
    ids: list[int]  # [CLS] tokens [SEP]
    positions: list[int]  # per labelled word of the piece: its first token's position in `ids`
    words: list[int]  # those words' indices in the sentence


@dataclasses.dataclass
class EncodedSentence:
    pieces: list[Piece]
    word_count: int

    @property
    def untokenized(self) -> int:
        """Words with no token (deleted by the preprocessing)."""
        return self.word_count - sum(len(p.words) for p in self.pieces)


class WordEncoder:
    """Encodes sentences (text + word spans) into pieces for a tokenizer (a transformers fast tokenizer or
    finetuning.tokenizer_adapter.TokenizerAdapter) and a preprocessor (None: none)."""

    def __init__(self, tokenizer, preprocessor, max_seq_length: int, preprocessing: str = ""):
        self.tokenizer, self.preprocessor, self.preprocessing = tokenizer, preprocessor, preprocessing
        self.before, self.after = template_frame(tokenizer)
        self.max_tokens = max(1, max_seq_length - len(self.before) - len(self.after))

    def encode(self, texts: Sequence[str], spans: Sequence[Sequence[tuple[int, int]]]) -> list[EncodedSentence]:
        aligned = [preprocess_aligned(text, self.preprocessor, self.preprocessing) for text in texts]
        batch = self.tokenizer([a.text for a in aligned], add_special_tokens=False, return_offsets_mapping=True)
        return [self._pieces(a, word_spans_, ids, offsets) for a, word_spans_, ids, offsets
                in zip(aligned, spans, batch["input_ids"], batch["offset_mapping"], strict=True)]

    def _pieces(self, aligned, spans, ids, offsets) -> EncodedSentence:
        starts = [s for s, _ in spans]
        owner = []
        for start, end in offsets:
            owner.append(_word_of(aligned, starts, spans, start, end))
        first: dict[int, int] = {}
        for t, w in enumerate(owner):
            if w >= 0 and w not in first:
                first[w] = t
        pieces, begin = [], 0
        while begin < len(ids):
            end = min(begin + self.max_tokens, len(ids))
            if end < len(ids):  # cut at the last word boundary inside the piece, if there is one
                cut = end
                while cut > begin + 1 and not _boundary(owner, cut):
                    cut -= 1
                end = cut if cut > begin + 1 else end
            words = [w for w in sorted({owner[t] for t in range(begin, end)}) if w >= 0 and begin <= first[w] < end]
            pieces.append(Piece([*self.before, *ids[begin:end], *self.after],
                                [first[w] - begin + len(self.before) for w in words], words))
            begin = end
        return EncodedSentence(pieces, len(spans))


_PROBE = "ا 0 a"  # any text the tokenizer gives a token for (its unknown token at worst)


def template_frame(tokenizer) -> tuple[list[int], list[int]]:
    """The ids the tokenizer's template puts before and after one text ([CLS] and [SEP] for BERT's), read from a call
    of the tokenizer itself (a transformers fast tokenizer or TokenizerAdapter), which places them as it does for QA's
    and classification's texts."""
    encoded = tokenizer([_PROBE], add_special_tokens=True)
    ids, sequence = list(encoded["input_ids"][0]), encoded.sequence_ids(0)
    inside = [i for i, s in enumerate(sequence) if s is not None]
    if not inside:
        raise ConfigError(f"the model's tokenizer gives no token for {_PROBE!r}: it cannot tag text")
    return ids[: inside[0]], ids[inside[-1] + 1 :]


def _boundary(owner: list[int], t: int) -> bool:
    """A piece may end before token t: t starts another word (tokens of no word stay with the word before)."""
    return owner[t] >= 0 and owner[t] != owner[t - 1]


def _word_of(aligned, starts: list[int], spans, start: int, end: int) -> int:
    """The word (index) a token's first character comes from, or -1."""
    if start >= end:
        return -1
    source = int(aligned.starts[start])
    empty = int(aligned.ends[start]) == source  # a character the preprocessing inserted (a `+` marker, a space)
    i = bisect.bisect_right(starts, source) - 1
    if i >= 0 and (source < spans[i][1] or (empty and source == spans[i][1])):
        return i
    if empty and i + 1 < len(spans) and spans[i + 1][0] == source:
        return i + 1
    return -1
