"""AraBERT v0.2 / v2 normalization, byte-identical to `arabert.preprocess.ArabertPreprocessor("bert-base-arabertv02")`.

The reference runs a dozen `re.sub` calls on every line. The same result comes from fewer, cheaper passes, most of
them skipped when a cheap test shows they cannot change the line:

1. `html.unescape`, then delete tashkeel (the eight marks pyarabic strips, not the dagger alef) and tatweel;
2. only when the line can contain one (`_URL_GATE`): the reference's URL regexes, then its e-mail regexes, then
   `@\\w+` mentions, each in the reference's order, replaced by ` [رابط] `, ` [بريد] `, ` [مستخدم] `;
3. only when the line has a `<`: `<br />` and any `</?[^>]+>` tag become a space;
4. only when some character occurs 3 times in a row: any non-digit character repeated 3+ times is cut to two
   (digits are `\\d` in Unicode, so Hindi digits are never cut);
5. one regex pass over the characters that are not Arabic letters, ASCII letters or digits, `[`, `]` or a space,
   each replaced through a per-character table: Hindi digits become ASCII digits, every whitelisted character gets
   a space on each side (`/` turns into ` - `), everything else (emoji, Persian letters, dagger alef, other
   whitespace) becomes a space;
6. only when an ASCII digit touches an Arabic letter: the reference's two digit/letter substitutions;
7. whitespace collapse.

Each rule and quirk (URLs before e-mails, so `a@b.org` becomes `[رابط]`; the squeeze before the spacing; the
whitelist) is pinned by golden files generated with the reference (tests/golden/).

`normalize_with_offsets` runs the same steps one at a time while carrying, for every character, the span of the
original text it comes from (see its docstring).
"""
from __future__ import annotations

import html
import re

URL_PLACEHOLDER = "[رابط]"
EMAIL_PLACEHOLDER = "[بريد]"
MENTION_PLACEHOLDER = "[مستخدم]"
PLACEHOLDERS = (URL_PLACEHOLDER, EMAIL_PLACEHOLDER, MENTION_PLACEHOLDER)

TASHKEEL = "\u064b\u064c\u064d\u064e\u064f\u0650\u0651\u0652"  # tanween x3, fatha, damma, kasra, shadda, sukun
TATWEEL = "\u0640"
HINDI_DIGITS = "٠١٢٣٤٥٦٧٨٩"
# Spelling variants that typed Arabic writes either way: alef forms → ا, alef maqsura → ي, teh marbuta → ه. Not part
# of AraBERT's normalization (its vocabularies keep them apart); matching text with text forgives them (the leakage
# guards, DrQA's overlap feature, retrieval's analysis).
LETTER_VARIANTS = str.maketrans({"أ": "ا", "إ": "ا", "آ": "ا", "ٱ": "ا", "ى": "ي", "ة": "ه"})

# The reference's URL regexes, in its order. It also runs a PHP-style pattern ending in `$@iS` that can never match
# (nothing can follow the end of the string) but can backtrack exponentially; it is left out: same output.
#
# Three of them (`[a-zA-Z]+\.com`, `[\w-]+@([\w-]+\.)+[\w-]+`, `\S+@\S+`) take quadratic time on a long run of their
# leading class that is not followed by what they need: from every start in the run the engine reads to its end and
# back (a 100,000-letter word took 70 s). They run here with a lookbehind that tries only the start of each run: a
# match from inside a run implies one from its start, which is further left and so the one the reference takes; the
# `.com` one may also start right after a `.com`, where its previous match ended inside a run. Same matches, in linear
# time (tests/test_preprocess_core.py checks them against the reference's patterns on drawn text).
_URL_PATTERNS = [
    r"(http(s)?:\/\/.)?(www\.)?[-a-zA-Z0-9@:%._\+~#=]{2,256}\.[a-z]{2,6}\b([-a-zA-Z0-9@:%_\+.~#?&//=]*)",
    r"http[s]?://[a-zA-Z0-9_\-./~\?=%&]+",
    r"www[a-zA-Z0-9_\-?=%&/.~]+",
    r"(?:(?<![a-zA-Z])|(?<=\.com))[a-zA-Z]+\.com",
    r"(?=http)[^\s]+",
    r"(?=www)[^\s]+",
    r"://",
]
_EMAIL_PATTERNS = [r"(?<![\w-])[\w-]+@([\w-]+\.)+[\w-]+", r"(?<!\S)\S+@\S+"]
_MENTION_PATTERN = r"@[\w\d]+"
_PLACEHOLDER_PASSES = [
    *((re.compile(p), f" {URL_PLACEHOLDER} ") for p in _URL_PATTERNS),
    *((re.compile(p), f" {EMAIL_PLACEHOLDER} ") for p in _EMAIL_PATTERNS),
    (re.compile(_MENTION_PATTERN), f" {MENTION_PLACEHOLDER} "),
]
# Every pattern above needs one of these, and the placeholders contain none, so a line without them skips all ten.
_URL_GATE = re.compile(r"\.[a-z]|@|://|www|http")
_BR = re.compile("<br />")
_TAG = re.compile("</?[^>]+>")
_REPEATED = re.compile(r"(\D)\1{2,}", re.DOTALL)
_STRIPPED = TASHKEEL + TATWEEL

_ARABIC_LETTERS = "\u0621-\u063a\u0641-\u064a"
_WORD_CLASS = f"0-9{_ARABIC_LETTERS}\u0660-\u0669a-zA-Z\\[\\]"
# Kept as they are by the spacing step (the reference puts spaces around every other character).
_WORD_CHAR = re.compile(f"[{_WORD_CLASS}]")
# The reference's whitelist: any other character becomes a space. `\s` is kept too (then collapsed).
_KEPT_CHAR = re.compile(
    "[0-9\u0621-\u063a\u0640-\u066c\u0671-\u0674a-zA-Z\\[\\]"
    "!\"#$%'()*+,.:;\\-<=·>?@\\\\^_`{|}~—٪’،؟୍“؛”ۚ»«–…‘\\s]"
)
# What step 5 must look at: everything but plain word characters and the ASCII space (Hindi digits included).
_NOT_WORD_OR_SPACE = re.compile(f"[^0-9{_ARABIC_LETTERS}a-zA-Z\\[\\] ]")
_TRIPLE = re.compile(r"(.)\1\1", re.DOTALL)
# The reference's digit/letter spacing is two substitutions, each padding the whole match with spaces: `C2و`
# becomes `C 2 و`, not `C2 و`. Kept as they are, behind a gate that finds whether either can match.
_DIGITS_LETTERS = re.compile(f"([0-9]+)([{_ARABIC_LETTERS}]+)")
_LETTERS_DIGITS = re.compile(f"([{_ARABIC_LETTERS}]+)([0-9]+)")
_DIGIT_LETTER_GATE = re.compile(f"[0-9][{_ARABIC_LETTERS}]|[{_ARABIC_LETTERS}][0-9]")


def char_class(ch: str) -> str:
    """How the spacing and whitelist steps treat one character (after Hindi digits became ASCII and `/` became `-`).

    "word": kept, glued to its neighbours; "punct": kept as a token of its own; "space": whitespace or rejected.
    """
    if _WORD_CHAR.match(ch):
        return "word"
    if ch.isspace() or not _KEPT_CHAR.match(ch):
        return "space"
    return "punct"


class _SpacingTable(dict):
    """Step 5 for one character, computed on first sight of each character (there are 1.1 M code points)."""

    def __missing__(self, ch: str) -> str:
        if ch in HINDI_DIGITS:
            out = str(HINDI_DIGITS.index(ch))
        elif ch == "/":
            out = " - "
        else:
            kind = char_class(ch)
            out = ch if kind == "word" else " " if kind == "space" else f" {ch} "
        self[ch] = out
        return out


_SPACING = _SpacingTable()


def _spacing(match: re.Match) -> str:
    return _SPACING[match[0]]


def replace_urls_emails_mentions(text: str) -> str:
    """Step 2 alone: the reference's URL, e-mail and mention regexes, in its order."""
    if _URL_GATE.search(text) is None:
        return text
    for pattern, placeholder in _PLACEHOLDER_PASSES:
        text = pattern.sub(placeholder, text)
    return text


def normalize(text: str) -> str:
    """AraBERT v0.2 normalization of one line (also the first half of v2)."""
    text = html.unescape(text)
    for ch in _STRIPPED:
        if ch in text:  # `in` + `replace` beat `translate`, which pays a dict lookup per character
            text = text.replace(ch, "")
    text = replace_urls_emails_mentions(text)
    if "<" in text:
        text = _TAG.sub(" ", _BR.sub(" ", text))
    if _TRIPLE.search(text):
        text = _REPEATED.sub(r"\1\1", text)
    text = _NOT_WORD_OR_SPACE.sub(_spacing, text)
    if _DIGIT_LETTER_GATE.search(text):
        text = _LETTERS_DIGITS.sub(r" \1 \2 ", _DIGITS_LETTERS.sub(r" \1 \2 ", text))
    return " ".join(text.split())


# ---------------------------------------------------------------------------------------------------------------
# The same steps, carrying offsets

Span = tuple[int, int]
# html.unescape's own pattern (CPython's html module); each match is unescaped alone, which gives the same text.
_NON_SPACE_RUN = re.compile(r"\S+")
_CHARREF = re.compile(r"&(#[0-9]+;?|#[xX][0-9a-fA-F]+;?|[^\t\n\f <&#;]{1,32};?)")


def _whole(spans: list[Span]) -> Span:
    return spans[0][0], spans[-1][1]


def _sub_with_offsets(pattern: re.Pattern, replace, text: str, spans: list[Span]) -> tuple[str, list[Span]]:
    """`pattern.sub` where `replace(match, match_spans) -> (new text, its spans)` also says where each char is from."""
    parts, new_spans, last = [], [], 0
    for match in pattern.finditer(text):
        start, end = match.span()
        parts.append(text[last:start])
        new_spans.extend(spans[last:start])
        replacement, replacement_spans = replace(match, spans[start:end])
        parts.append(replacement)
        new_spans.extend(replacement_spans)
        last = end
    if not parts:
        return text, spans
    parts.append(text[last:])
    new_spans.extend(spans[last:])
    return "".join(parts), new_spans


def _to_whole(text: str):
    """A replacement by a fixed text, every char of which comes from the whole match (placeholders, tags)."""
    return lambda match, spans: (text, [_whole(spans)] * len(text))


def _unescape(match: re.Match, spans: list[Span]) -> tuple[str, list[Span]]:
    out = html.unescape(match[0])
    if out == match[0]:  # `&` + text that is no entity ('http://&ء'): every character stays its own
        return out, spans
    return out, [_whole(spans)] * len(out)


def _squeeze(match: re.Match, spans: list[Span]) -> tuple[str, list[Span]]:
    # The second kept character stands for the whole rest of the run.
    return match[1] * 2, [spans[0], (spans[1][0], spans[-1][1])]


def _space_one(match: re.Match, spans: list[Span]) -> tuple[str, list[Span]]:
    out = _SPACING[match[0]]
    return out, spans * len(out)


def _pad_groups(match: re.Match, spans: list[Span]) -> tuple[str, list[Span]]:
    # " \1 \2 ": each inserted space takes the span of the character next to it.
    split = len(match[1])
    return (f" {match[1]} {match[2]} ",
            [spans[0], *spans[:split], spans[split - 1], *spans[split:], spans[-1]])


def _delete_with_offsets(text: str, spans: list[Span], chars: str) -> tuple[str, list[Span]]:
    """Delete `chars`; a deleted mark widens the span of the character before it (or, first in the text, after it),
    so an answer ending in a letter still covers its diacritics in the original text."""
    if not any(ch in text for ch in chars):
        return text, spans
    kept: list[str] = []
    kept_spans: list[Span] = []
    pending: int | None = None
    for ch, span in zip(text, spans, strict=True):
        if ch in chars:
            if kept_spans:
                kept_spans[-1] = (kept_spans[-1][0], span[1])
            elif pending is None:
                pending = span[0]
            continue
        if pending is not None:
            span, pending = (pending, span[1]), None
        kept.append(ch)
        kept_spans.append(span)
    return "".join(kept), kept_spans


def _collapse_with_offsets(text: str, spans: list[Span]) -> tuple[str, list[Span]]:
    """`" ".join(text.split())`. The space left between two words spans the original text between them: empty
    where they touched (`C2` → `C 2`), whitespace or removed characters otherwise."""
    parts: list[str] = []
    new_spans: list[Span] = []
    for match in _NON_SPACE_RUN.finditer(text):
        start, end = match.span()
        if new_spans:
            gap = (new_spans[-1][1], spans[start][0])
            parts.append(" ")
            new_spans.append((min(gap), max(gap)))  # reversed when both words come from one entity or placeholder
        parts.append(match[0])
        new_spans.extend(spans[start:end])
    return "".join(parts), new_spans


def normalize_with_offsets(text: str) -> tuple[str, list[Span]]:
    """`normalize(text)`, and for each output character the half-open span of `text` it comes from.

    Kept characters map to themselves; a placeholder, an HTML entity or a removed tag maps every character it
    becomes to the whole match; a squeezed run maps its second kept character to the rest of the run; deleted
    tashkeel and tatweel widen the span of the character before them; a space maps to the whitespace (or removed
    characters) it stands for, an empty span where the reference split two touching characters. Span starts and
    ends never decrease from one character to the next.
    """
    spans = [(i, i + 1) for i in range(len(text))]
    if "&" in text:
        text, spans = _sub_with_offsets(_CHARREF, _unescape, text, spans)
    text, spans = _delete_with_offsets(text, spans, _STRIPPED)
    if _URL_GATE.search(text):
        for pattern, placeholder in _PLACEHOLDER_PASSES:
            text, spans = _sub_with_offsets(pattern, _to_whole(placeholder), text, spans)
    if "<" in text:
        text, spans = _sub_with_offsets(_BR, _to_whole(" "), text, spans)
        text, spans = _sub_with_offsets(_TAG, _to_whole(" "), text, spans)
    text, spans = _sub_with_offsets(_REPEATED, _squeeze, text, spans)
    text, spans = _sub_with_offsets(_NOT_WORD_OR_SPACE, _space_one, text, spans)
    text, spans = _sub_with_offsets(_DIGITS_LETTERS, _pad_groups, text, spans)
    text, spans = _sub_with_offsets(_LETTERS_DIGITS, _pad_groups, text, spans)
    return _collapse_with_offsets(text, spans)
