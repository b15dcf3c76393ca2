"""`Preprocessor(name)`: the preprocessing a tokenizer or model was trained with, by name.

    p = Preprocessor("arabertv2")
    p.preprocess("وسيكتبونها")          # 'و+ س+ يكتب +ون +ها'
    p.unpreprocess('و+ س+ يكتب +ون +ها')  # 'وسيكتبونها'

Names: "arabertv02" (normalization, = ArabertPreprocessor("bert-base-arabertv02")), "arabertv2" (the same plus Farasa
segmentation marked the AraBERT way, = ArabertPreprocessor("bert-base-arabertv2") given the same Farasa output) and
"none" (identity, for vocabularies trained on raw text such as mBERT's). AraBERT's model names are accepted as
ArabertPreprocessor(model_name) accepts them, with or without "aubmindlab/": `Preprocessor("bert-base-arabertv2")`
is `Preprocessor("arabertv2")` (`MODEL_PREPROCESSING`). Unlike ArabertPreprocessor, an unknown name is an error, not a
silent fallback to v02, and the first-generation (v0.1, v1) and Twitter models, whose preprocessing differs (other
character sets; emojis kept), are refused by name.
"""
from __future__ import annotations

import difflib
import os
import re

from ..errors import ConfigError, InputError
from .normalize import Span, normalize, normalize_with_offsets
from .segment import CachedSegmenter, default_segmenter, desegment, mark_token_groups, mark_tokens

PREPROCESSING_NAMES = ("arabertv02", "arabertv2", "none")
# ArabertPreprocessor's accepted model names → ours: v2 models are Farasa-segmented, the other second-generation
# models (AraBERTv0.2, AraELECTRA, AraGPT2) are not.
MODEL_PREPROCESSING = {
    **dict.fromkeys(("bert-base-arabertv2", "bert-large-arabertv2"), "arabertv2"),
    **dict.fromkeys((
        "bert-base-arabertv02", "bert-large-arabertv02", "araelectra-base", "araelectra-base-discriminator",
        "araelectra-base-generator", "araelectra-base-artydiqa", "aragpt2-base", "aragpt2-medium", "aragpt2-large",
        "aragpt2-mega"), "arabertv02"),
}
_UNSUPPORTED_MODELS = {
    "bert-base-arabertv01": "first-generation preprocessing",
    "bert-base-arabert": "first-generation preprocessing",
    "bert-base-arabertv02-twitter": "emojis kept",
    "bert-large-arabertv02-twitter": "emojis kept",
}
SEGMENTED_NAMES = ("arabertv2",)
# A literal `+` is AraBERT v2's segment marker: Farasa gives it no segment and the reference drops it from the line.
SEGMENT_MARKER = "+"

# ArabertPreprocessor.unpreprocess, in its order. Its replacement strings for backquotes and em dashes are "\`" and
# "\—", which keep the backslash: reproduced.
_UNPREPROCESS_QUOTES = [
    (re.compile(r'"\s+([^"]+)\s+"'), r'"\1"'),
    (re.compile(r"'\s+([^']+)\s+'"), r"'\1'"),
    (re.compile(r"`\s+([^`]+)\s+`"), r"\\`\1\\`"),
    (re.compile(r"—\s+([^—]+)\s+—"), r"\\—\1\\—"),
]
_DECIMALS = [(re.compile(r"(\d+) \. (\d+)"), r"\1.\2"), (re.compile(r"(\d+) \, (\d+)"), r"\1,\2")]
_UNSPACE = [
    (re.compile(r" ([+\-<=>@\\^_|–]) "), r"\1"),
    (re.compile(r" ([\]!#$%),.:;?}٪’،؟”؛…»·])"), r"\1"),
    (re.compile(r"([\[({“«‘*~]) "), r"\1"),
]


def preprocessing_name(name: object) -> str:
    """Our preprocessing name for `name`: one of PREPROCESSING_NAMES, or an AraBERT model name mapped to one."""
    if not isinstance(name, str):
        raise ConfigError(f"a preprocessing name must be a string, not {type(name).__name__}")
    if name in PREPROCESSING_NAMES:
        return name
    model = name.removeprefix("aubmindlab/").removeprefix("wissamantoun/")
    if model in MODEL_PREPROCESSING:
        return MODEL_PREPROCESSING[model]
    if model in _UNSUPPORTED_MODELS:
        raise ConfigError(f"{name}: its preprocessing ({_UNSUPPORTED_MODELS[model]}) is not one this package "
                          f"reproduces; supported: {', '.join(PREPROCESSING_NAMES)} and the models of "
                          f"{', '.join(sorted(MODEL_PREPROCESSING))}")
    raise ConfigError(f"unknown preprocessing {name!r}; choose one of {', '.join(PREPROCESSING_NAMES)}, or an AraBERT "
                      f"model name ({', '.join(sorted(MODEL_PREPROCESSING))})")


def segmenter_backend(name: str, farasa_jar: str | os.PathLike[str] | None = None) -> str | None:
    """The name of the segmenter `Preprocessor(name, farasa_jar=...)` uses, or None when it does not segment."""
    return default_segmenter(farasa_jar).name if preprocessing_name(name) in SEGMENTED_NAMES else None


def _check_text(text: object, line: int | None = None) -> None:
    # Every name, "none" included, takes text only: None or bytes passed through unchanged would surface far away.
    if not isinstance(text, str):
        raise InputError(f"expected text (str), got {type(text).__name__}", line=line)


class Preprocessor:
    """Preprocess text the way a named AraBERT model expects, and undo it for display."""

    def __init__(self, name: str, *, farasa_jar: str | os.PathLike[str] | None = None,
                 segmenter: CachedSegmenter | None = None):
        name = preprocessing_name(name)
        self.name = name
        self.segments = name in SEGMENTED_NAMES
        self.segmenter = (segmenter or default_segmenter(farasa_jar)) if self.segments else None

    def __repr__(self) -> str:
        backend = f", segmenter={self.segmenter.name!r}" if self.segmenter is not None else ""
        return f"Preprocessor({self.name!r}{backend})"

    def preprocess(self, text: str) -> str:
        return self.preprocess_batch([text])[0]

    def preprocess_batch(self, texts: list[str]) -> list[str]:
        """Preprocess many lines; with segmentation, each distinct word of the batch is segmented once."""
        texts = list(texts)
        for index, text in enumerate(texts):
            _check_text(text, index + 1)
        if self.name == "none":
            return texts
        normalized = [normalize(t) for t in texts]
        if self.segmenter is None:  # a name that does not segment
            return normalized
        lines = [[w for w in line.split(" ") if w != SEGMENT_MARKER] if line else [] for line in normalized]
        tokens = iter(self.segmenter.segment_words([w for line in lines for w in line]))
        return [" ".join(mark_tokens([t for _ in line for t in next(tokens)])) for line in lines]

    def preprocess_with_offsets(self, text: str) -> tuple[str, list[Span]]:
        """`preprocess(text)`, and for each output character the half-open span of `text` it comes from.

        Characters copied from the text map to themselves (a placeholder to the whole URL, e-mail or mention);
        characters the preprocessing inserts (spaces, `+` markers, the `ا` of Farasa's `ل+ال`) get the span
        between their neighbours' spans, usually empty. Span starts and ends never decrease.
        """
        _check_text(text)
        if self.name == "none":
            return text, [(i, i + 1) for i in range(len(text))]
        out, spans = normalize_with_offsets(text)
        if self.segmenter is None:  # a name that does not segment
            return out, spans
        words, word_spans, position = [], [], 0
        for word in out.split(" ") if out else []:
            if word != SEGMENT_MARKER:
                words.append(word)
                word_spans.append(spans[position:position + len(word)])
            position += len(word) + 1
        token_lists = self.segmenter.segment_words(words)
        groups = iter(mark_token_groups([t for tokens in token_lists for t in tokens]))
        pieces: list[str] = []
        piece_spans: list[Span | None] = []
        for word, source_spans, tokens in zip(words, word_spans, token_lists, strict=True):
            marked = [piece for _ in tokens for piece in next(groups)]
            if not marked:
                continue
            if pieces:
                pieces.append(" ")
                piece_spans.append(None)
            joined = " ".join(marked)
            pieces.append(joined)
            piece_spans.extend(None if i is None else source_spans[i] for i in _align(word, joined))
        return "".join(pieces), _fill_gaps(piece_spans)

    def desegment(self, text: str) -> str:
        """Remove AraBERT v2 segmentation markers (identity for names that do not segment)."""
        return desegment(text) if self.segments else text

    def unpreprocess(self, text: str) -> str:
        """Readable text from preprocessed text, as ArabertPreprocessor.unpreprocess: desegment, then reattach
        punctuation, quotes and decimals."""
        if self.name == "none":
            return text
        text = self.desegment(text)
        for pattern, replacement in _UNPREPROCESS_QUOTES:
            text = pattern.sub(replacement, text)
        text = " ".join(text.replace(".", " . ").split())
        for pattern, replacement in _DECIMALS + _UNSPACE:
            text = pattern.sub(replacement, text)
        return text


def _align(source: str, target: str) -> list[int | None]:
    """For each character of `target`, the index of the `source` character it copies, or None if inserted."""
    letters = [i for i, ch in enumerate(target) if ch not in "+ "]
    index: list[int | None] = [None] * len(target)
    if len(letters) == len(source) and all(target[i] == ch for i, ch in zip(letters, source, strict=True)):
        for i, j in zip(letters, range(len(source)), strict=True):
            index[i] = j
        return index
    # Farasa changed the letters (`لل` read as `ل+ال`, brackets split off and dropped): match what is common.
    matcher = difflib.SequenceMatcher(None, source, target, autojunk=False)
    for block in matcher.get_matching_blocks():
        for k in range(block.size):
            index[block.b + k] = block.a + k
    return index


def _fill_gaps(spans: list[Span | None]) -> list[Span]:
    """Give each inserted character (None) the span between its nearest copied neighbours, so spans stay monotone:
    empty where the neighbours touch, the removed text between them otherwise."""
    filled: list[Span] = []
    i, n = 0, len(spans)
    while i < n:
        span = spans[i]
        if span is not None:
            filled.append(span)
            i += 1
            continue
        j = i
        while j < n and spans[j] is None:
            j += 1
        before = filled[-1][1] if filled else None
        following = spans[j] if j < n else None  # not None: the loop above stops at a copied character
        after = following[0] if following is not None else None
        ends = [p for p in (before, after) if p is not None] or [0]
        filled.extend([(min(ends), max(ends))] * (j - i))
        i = j
    return filled
