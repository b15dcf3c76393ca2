"""Per-question Exact Match, F1 and Sentence-Match, computed two ways.

**SOQAL-compatible** (`variant="soqal"`): the definitions of SOQAL's `bert/evaluate.py`, which produced the ARCD
numbers of the AraBERT paper (Table 6), reimplemented exactly:
- answer normalization: lowercase; delete ASCII `string.punctuation`; replace the English words a/an/the by a space;
  replace EVERY "ال" by a space, even inside a word; collapse whitespace. Nothing else: diacritics, tatweel, Arabic
  punctuation and alef forms stay as they are. Examples: "قال الرجل" → "ق رجل"; "الرجل،" → "رجل،" (the Arabic comma
  stays, so it does not equal "الرجل"); "مُحَمَّد" ≠ "محمد".
- EM = normalized strings equal; F1 = bag-of-whitespace-tokens overlap (0 when nothing overlaps, even if both sides
  normalize to ""); each the max over the gold answers.
- SM: the context is split as English Punkt (nltk 3.5, the version of SOQAL's time) splits it (`punkt_sentence_spans`:
  boundaries after `.` `!` `?` only, so "؟" is NOT a boundary); gold index = the LAST sentence containing the FIRST
  gold answer as a raw substring, predicted index = the last sentence containing the raw prediction; hit iff both exist
  and are equal. An answer crossing a sentence boundary is in no sentence and scores 0. Quirk kept: an empty
  prediction is "found" in every sentence, so it hits when the gold answer is in the last sentence.
  Gameable, and kept only to compare with the paper: the prediction is located by a text search, so a one-letter
  prediction is "found" in the last sentence and hits whenever the gold answer is there: "ا" for every ARCD-test
  question scores SM 41.5, "." 40.7 (the first sentence of the context: 54.1). Read it next to EM/F1, never alone.

**Arabic-correct** (`variant="arabic"`): what the metric is meant to measure, with Arabic orthography handled:
- answer normalization (`arabic_normalize`): Unicode NFKC (folds presentation forms such as "ﻻ"); lowercase; remove
  diacritics incl. dagger alef (camel-tools `dediac_ar`) and tatweel; every Unicode punctuation character and ASCII
  `string.punctuation` becomes a space (Arabic text often has no space after "،" or around quotes, so deleting them
  would glue words together); English a/an/the removed as in SQuAD; the article stripped only as a word prefix
  (`strip_article`); then alef forms أ إ آ ٱ → ا (camel-tools `normalize_alef_ar`), ى → ي and ة → ه (the two most
  frequent spelling variants in typed Arabic; they merge a few distinct words such as على/علي, which matters less
  for answer matching than rejecting "القاهرة" vs "القاهره"); collapse whitespace.
  Examples: "قال الرجل" → "قال رجل"; "الرجل،" → "رجل" == "الرجل"; "مُحَمَّد" == "محمد"; "والكتاب" → "كتاب".
- EM / F1 as SQuAD, except that two answers that both normalize to "" score 1 (SQuAD v2's rule) rather than F1 0.
- SM (`arabic_sentence_match`): sentences end after . ! ? ؟ ۔ … ؞ ⸮ (optionally followed by closing quotes, brackets
  or citation marks such as "[1]") when whitespace or the end of text follows, and at every newline; no abbreviation
  list, so "د. محمد" (Dr.) splits, as it does for Punkt. A hit means the prediction lies inside the sentence(s)
  holding ANY gold answer; a gold answer crossing a boundary covers both sentences. Both sides are located by
  offset, never by searching for their text (a search finds "ا" or "." in every sentence):
  - the gold answer at its `answer_start`; only if the dataset's `answer_start` does not point at the answer text
    (a misaligned gold answer) at the one occurrence of that text, and nowhere if it occurs more than once;
  - the prediction at its start offset (our QAModel gives it; prediction files carry it as {"text", "start"}),
    which must point at the prediction's text in the context, else the prediction is located nowhere and scores 0;
  - a text-only prediction (no start offset) at its occurrence in the context if there is exactly one; a text that
    occurs several times is ambiguous (it cannot say which occurrence it means) and scores 0.
  An empty prediction never hits. (Searching for the prediction's text, as this variant did before, let "ا" score
  99.6 on ARCD-test and "." 97.2; located by offset, a prediction can do no better than the sentence it is in.)

Every score is per question in [0, 1]; a missing prediction scores 0 on everything (`score_question(..., None)`).
They live in the QA stage because fine-tuning chooses its epoch and decoder on them; `evaluate/metrics.py` adds
the statistics over all questions (bootstrap CIs, paired tests).
"""
from __future__ import annotations

import itertools
import re
import string
import unicodedata
from collections import Counter
from collections.abc import Callable
from typing import Any

import regex

VARIANTS = ("soqal", "arabic")
METRICS = ("em", "f1", "sm")
SCORE_KEYS = tuple(f"{variant}_{metric}" for variant in VARIANTS for metric in METRICS)
# The paper's metric: every choice made on dev (an epoch, the decoding settings) is made on it, pooled over the
# questions of all dev sets, by both readers.
DEV_METRIC = "soqal_f1"

# --------------------------------------------------------------------------------------------------------------------
# SOQAL-compatible normalization

_ASCII_PUNCTUATION = str.maketrans("", "", string.punctuation)
_ENGLISH_ARTICLE_RE = re.compile(r"\b(a|an|the)\b")


def soqal_normalize(text: str) -> str:
    """SOQAL's answer normalization (see the module docstring): "قال الرجل" → "ق رجل"."""
    text = text.lower().translate(_ASCII_PUNCTUATION)
    text = _ENGLISH_ARTICLE_RE.sub(" ", text)
    text = text.replace("ال", " ")
    return " ".join(text.split())


# --------------------------------------------------------------------------------------------------------------------
# English Punkt sentence splitting, as `nltk.sent_tokenize` (nltk 3.5, English model) does it.
#
# Written here because nltk's English model is not installable offline (it is a separate data download). The rules
# below follow nltk 3.5's PunktSentenceTokenizer; the abbreviations, collocations and frequent sentence starters are
# NLTK's English `punkt_tab` parameters (Apache-2.0). The one part left out is the trained orthographic context
# (20k word types with their observed capitalisation): it only matters after a period followed by a capitalised
# Latin word, and all 1,981 contexts of ARCD, TyDiQA-GoldP-ar dev, XQuAD-ar and MLQA-ar dev split exactly as nltk 3.5
# splits them (tests/test_evaluate_metrics.py checks this against golden spans). nltk >= 3.9 also treats curly
# quotes and guillemets as closing punctuation; that changes 3 of those 1,981 contexts, and SOQAL predates it.

_PUNKT_ABBREVIATIONS = frozenset(
    """. . |a.a|a.c|a.d|a.g|a.h|a.m|a.m.e|a.s|a.t|adm|ala|ariz|aug|ave|b.f|b.v|bros|c|c.i.t|c.o.m.b|c.v|calif|chg|cie|
    co|col|colo|conn|corp|cos|ct|d|d.c|d.h|d.w|dec|dr|e|e.f|e.h|e.l|e.m|f|f.g|f.j|feb|fla|fri|ft|g|g.d|g.f|g.k|ga|gen|h|
    h.c|h.f|h.m|i.m.s|ill|inc|j.b|j.c|j.j|j.k|j.p|j.r|jan|jr|k|kan|ky|l|l.a|l.f|l.p|lt|ltd|m|m.b.a|m.d.c|m.j|maj|messrs|
    mg|mich|minn|mr|mrs|ms|n|n.c|n.d|n.h|n.j|n.m|n.v|n.y|nev|nov|oct|ok|okla|ore|p|p.a.m|p.m|pa|ph.d|prof|r|r.a|r.h|r.i|
    r.j|r.k|r.t|rep|reps|s|s.a|s.a.y|s.c|s.g|s.p.a|s.s|sen|sep|sept|sr|st|sw|t|t.j|tenn|tues|u.k|u.n|u.s|u.s.a|u.s.s.r|
    v|va|vs|vt|w|w.c|w.r|w.va|w.w|wash|wed|wis|yr""".replace("\n    ", "").split("|")
)
_PUNKT_SENTENCE_STARTERS = frozenset(
    "according although among both but despite even he however i if in indeed instead it many meanwhile moreover most "
    "nevertheless nonetheless nor sales separately similarly since so some the there these they this though thus "
    "under when while yet".split()
)
_PUNKT_COLLOCATIONS = frozenset(
    [("##number##", w) for w in "abreast aes business cbot colgate commodities cooper corrections credit dividend "
     "financing genentech henley insider international leisure letters notable pay-fone pegasus pepper review rj "
     "wedgestone who zimmer".split()]
    + [("b", w) for w in "edelman levine smith stewart wigton".split()]
    + [("i", "magnin"), ("i", "toussie"), ("j", "aron"), ("j", "fialka"), ("j", "walter"), ("o", "ludcke")]
)
_PUNKT_NON_WORD = r"""[?!)";}\]*:@'({\[]"""
_PUNKT_MULTI_CHAR = r"(?:-{2,}|\.{2,}|(?:\.\s){2,}\.)"
_PUNKT_WORD_RE = re.compile(
    rf"""{_PUNKT_MULTI_CHAR}
    |(?=[^("`{{\[:;&\#*@)}}\]\-,])\S+?(?=\s|$|{_PUNKT_NON_WORD}|{_PUNKT_MULTI_CHAR}
        |,(?=$|\s|{_PUNKT_NON_WORD}|{_PUNKT_MULTI_CHAR}))
    |\S""",
    re.VERBOSE,
)
_PUNKT_CANDIDATE_RE = re.compile(rf"\S*[.?!](?=(?P<after>{_PUNKT_NON_WORD}|\s+(?P<next>\S+)))")
_PUNKT_REALIGN_RE = re.compile(r"""["')\]}]+?(?:\s+|(?=--)|$)""", re.MULTILINE)
_PUNKT_NUMBER_RE = re.compile(r"^-?[.,]?\d[\d,.-]*\.?$")
_PUNKT_INITIAL_RE = re.compile(r"[^\W\d]\.$")
_BREAK, _ABBREVIATION, _ELLIPSIS = "break", "abbreviation", "ellipsis"


def _punkt_type(token: str, drop_period: bool) -> str:
    typ = _PUNKT_NUMBER_RE.sub("##number##", token.lower())
    if drop_period and len(typ) > 1 and typ.endswith("."):
        typ = typ[:-1]
    return typ


def _punkt_first_pass(token: str) -> str | None:
    if token in (".", "?", "!"):
        return _BREAK
    if re.match(r"\.\.+$", token):
        return _ELLIPSIS
    if token.endswith(".") and not token.endswith(".."):
        word = token[:-1].lower()
        if word in _PUNKT_ABBREVIATIONS or word.split("-")[-1] in _PUNKT_ABBREVIATIONS:
            return _ABBREVIATION
        return _BREAK
    return None


def _punkt_starts_sentence(token: str) -> bool | None:
    """Punkt's orthographic heuristic without the trained capitalisation table: True / False / None (unknown)."""
    if token in tuple(";:,.!?"):
        return False
    if token[0].islower():  # never seen capitalised nor sentence-initially lowercase: not a sentence starter
        return False
    return None


def _punkt_second_pass(token: str, flag: str | None, following: str, following_flag: str | None) -> str | None:
    if not token.endswith("."):
        return flag
    typ = _punkt_type(token, drop_period=True)
    next_typ = _punkt_type(following, drop_period=following_flag == _BREAK)
    initial = bool(_PUNKT_INITIAL_RE.match(token))
    if (typ, next_typ) in _PUNKT_COLLOCATIONS:
        return _ABBREVIATION
    if (flag in (_ABBREVIATION, _ELLIPSIS) and not initial and following[0].isupper()
            and next_typ in _PUNKT_SENTENCE_STARTERS):
        return _BREAK
    if initial or typ == "##number##":
        starts = _punkt_starts_sentence(following)
        if starts is False:
            return _ABBREVIATION
        if starts is None and initial and following[0].isupper():  # "J. Bach"
            return _ABBREVIATION
    return flag


def _punkt_context_has_break(context: str) -> bool:
    tokens = _PUNKT_WORD_RE.findall(context)
    flags = [_punkt_first_pass(token) for token in tokens]
    # Punkt ignores a break on the last token of the context: it cannot see what follows it.
    return any(
        _punkt_second_pass(tokens[i], flags[i], tokens[i + 1], flags[i + 1]) == _BREAK for i in range(len(tokens) - 1)
    )


def punkt_sentence_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) character spans of the sentences `nltk.sent_tokenize(text)` (English Punkt) returns."""
    slices, last = [], 0
    for match in _PUNKT_CANDIDATE_RE.finditer(text):
        if _punkt_context_has_break(match.group() + match.group("after")):
            slices.append((last, match.end()))
            last = match.start("next") if match.group("next") else match.end()
    slices.append((last, len(text.rstrip())))
    # Closing quotes and brackets after a boundary belong to the sentence before it: "(Sent1.) Sent2."
    spans, shift = [], 0
    for i, (start, end) in enumerate(slices):
        start += shift
        if i + 1 == len(slices):
            if text[start:end]:
                spans.append((start, end))
            continue
        next_start, next_end = slices[i + 1]
        moved = _PUNKT_REALIGN_RE.match(text[next_start:next_end])
        if moved:
            spans.append((start, next_start + len(moved.group().rstrip())))
            shift = moved.end()
        else:
            shift = 0
            if text[start:end]:
                spans.append((start, end))
    return spans


def soqal_sentence_match(context: str, prediction: str, first_gold: str) -> float:
    """1.0 iff the last Punkt sentence holding `first_gold` is the last one holding `prediction` (raw substrings)."""
    gold_index = predicted_index = -1
    for index, (start, end) in enumerate(punkt_sentence_spans(context)):
        sentence = context[start:end]
        if first_gold in sentence:
            gold_index = index
        if prediction in sentence:
            predicted_index = index
    return float(gold_index == predicted_index != -1)


# --------------------------------------------------------------------------------------------------------------------
# Arabic-correct normalization and sentence splitting

# Longest first. Each is the definite article, alone or after the one-letter proclitics that attach to it (و ف ب ك),
# and "لل" = لـ + الـ (the alef of the article is not written after lām). The article is written with a bare alef or
# alef wasla; "أل"/"إل" (hamza) starts a different word (ألف, إلى), so the article is stripped before alef forms are
# unified. At least two letters must remain, which keeps short words that merely start with these letters (الا،
# والي، لله, بالغ).
ARTICLE_PREFIXES = ("وال", "فال", "بال", "كال", "ولل", "فلل", "وٱل", "فٱل", "بٱل", "كٱل", "ال", "ٱل", "لل")
_MIN_STEM = 2
_PUNCTUATION_RE = regex.compile(r"[\p{P}" + regex.escape(string.punctuation) + "]")


def strip_article(word: str) -> str:
    """"الرجل" → "رجل", "والكتاب" → "كتاب", "للعلم" → "علم"; "قال", "الا", "ألف" unchanged."""
    for prefix in ARTICLE_PREFIXES:
        if word.startswith(prefix) and len(word) - len(prefix) >= _MIN_STEM:
            return word[len(prefix) :]
    return word


def arabic_normalize(text: str) -> str:
    """Arabic-correct answer normalization (see the module docstring): "الرَّجُلُ،" → "رجل"."""
    # Imported here: camel-tools takes about a second to import and only this variant needs it.
    from camel_tools.utils.dediac import dediac_ar
    from camel_tools.utils.normalize import normalize_alef_ar, normalize_alef_maksura_ar, normalize_teh_marbuta_ar

    text = dediac_ar(unicodedata.normalize("NFKC", text).lower()).replace("\u0640", "")
    text = _ENGLISH_ARTICLE_RE.sub(" ", _PUNCTUATION_RE.sub(" ", text))
    text = " ".join(strip_article(word) for word in text.split())
    return normalize_teh_marbuta_ar(normalize_alef_maksura_ar(normalize_alef_ar(text)))


# . ! ? ؟ (Arabic question mark) ۔ (Arabic full stop) … ؞ (Arabic triple dot) ⸮ (reversed question mark), then
# optional closing quotes/brackets and Wikipedia citation marks ("الولادة.[1][2] ثم"), then whitespace or the end; or a
# newline on its own. "3.5" and "U.S" stay whole.
_ARABIC_BOUNDARY_RE = re.compile(r"""[.!?؟۔…؞⸮]+(?:["'»”’)\]}]|\[\d+\])*(?=\s|$)|\n""")


def arabic_sentence_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) spans of the sentences of `text`, without surrounding whitespace, for Arabic-correct SM."""
    cuts = [0] + [m.end() for m in _ARABIC_BOUNDARY_RE.finditer(text)] + [len(text)]
    spans = []
    for start, end in itertools.pairwise(cuts):
        piece = text[start:end]
        stripped = piece.strip()
        if stripped:
            left = start + len(piece) - len(piece.lstrip())
            spans.append((left, left + len(stripped)))
    return spans


def _locate(context: str, text: str, start: int | None) -> int | None:
    """Where `text` is in `context`: at `start` if it points at the text; with no start, at its only occurrence."""
    if not text:
        return None
    if start is not None:
        return start if start >= 0 and context[start : start + len(text)] == text else None
    found = context.find(text)
    return found if found >= 0 and context.find(text, found + 1) < 0 else None


def arabic_sentence_match(
    context: str, prediction: str, answers: dict[str, list], prediction_start: int | None = None
) -> float:
    """1.0 iff the prediction, located by offset, lies within the sentence(s) holding one of the gold answers (see
    the module docstring for how a prediction without a start offset, or a misaligned gold answer, is located)."""
    if not prediction.strip():
        return 0.0
    position = _locate(context, prediction, prediction_start)
    if position is None:
        return 0.0
    # Sentences are trimmed, so the prediction's own edge whitespace must not push it outside one.
    begin = position + len(prediction) - len(prediction.lstrip())
    end = begin + len(prediction.strip())
    sentences = arabic_sentence_spans(context)
    for text, start in zip(answers["text"], answers["answer_start"], strict=True):
        gold = _locate(context, text, start)
        if gold is None:
            gold = _locate(context, text, None)  # a misaligned answer_start: its text, if it occurs once
        if gold is None:
            continue
        covering = [(s, e) for s, e in sentences if s < gold + len(text) and gold < e]
        if covering and covering[0][0] <= begin and end <= covering[-1][1]:
            return 1.0
    return 0.0


# --------------------------------------------------------------------------------------------------------------------
# EM / F1 and the per-question record


def exact_match(prediction: str, gold: str, normalize: Callable[[str], str]) -> float:
    return float(normalize(prediction) == normalize(gold))


def token_f1(prediction: str, gold: str, normalize: Callable[[str], str], *, empty_matches_empty: bool) -> float:
    predicted, expected = normalize(prediction).split(), normalize(gold).split()
    if empty_matches_empty and not (predicted and expected):
        return float(predicted == expected)
    overlap = sum((Counter(predicted) & Counter(expected)).values())
    if overlap == 0:
        return 0.0
    precision, recall = overlap / len(predicted), overlap / len(expected)
    return 2 * precision * recall / (precision + recall)


def score_question(example: dict[str, Any], prediction: str | None, prediction_start: int | None = None) -> dict:
    """{"soqal_em", "soqal_f1", "soqal_sm", "arabic_em", "arabic_f1", "arabic_sm"} in [0, 1] for one question.

    `prediction=None` means the system gave no answer: every score is 0.
    """
    if prediction is None:
        return dict.fromkeys(SCORE_KEYS, 0.0)
    golds = list(example["answers"]["text"])
    context = example["context"]
    return {
        "soqal_em": max(exact_match(prediction, g, soqal_normalize) for g in golds),
        "soqal_f1": max(token_f1(prediction, g, soqal_normalize, empty_matches_empty=False) for g in golds),
        "soqal_sm": soqal_sentence_match(context, prediction, golds[0]),
        "arabic_em": max(exact_match(prediction, g, arabic_normalize) for g in golds),
        "arabic_f1": max(token_f1(prediction, g, arabic_normalize, empty_matches_empty=True) for g in golds),
        "arabic_sm": arabic_sentence_match(context, prediction, example["answers"], prediction_start),
    }
