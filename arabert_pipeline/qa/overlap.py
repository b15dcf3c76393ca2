"""Which context words also occur in the question: DrQA's exact-match feature, for Arabic.

A QA model that reads `[CLS] question [SEP] context [SEP]` has to learn from a few thousand questions that the answer
sits next to the context words the question repeats. DrQA (Chen et al. 2017) gives its reader that fact as an input
feature, and without it (and its aligned-question feature) SQuAD F1 fell from 78.8 to 59.4. Here the feature is a
third token type: context tokens whose word matches a question word get `token_type_ids` 2 instead of 1, so a
standard `BertForQuestionAnswering` (with `type_vocab_size` 3) reads it.

Words match on a key that forgives what Arabic spelling and morphology vary without changing the word: diacritics
and tatweel, alef/yeh/teh-marbuta variants, the article and one-letter proclitics (و ف ب ل ك), and one frequent
suffix (pronouns, plural and feminine endings). Function words (`STOPWORDS`) never match: they occur in every
sentence and would mark most of the context. Chosen on the dev split (ARCD-train), where the same key lifted the
TF-IDF sentence picker's Sentence-Match from 82.1 (diacritics/alef only) to 84.6.
"""
from __future__ import annotations

import collections
import functools
import math
import re
import unicodedata
from collections.abc import Iterable

from ..preprocess.normalize import LETTER_VARIANTS
from .metrics import arabic_sentence_spans

_DIACRITICS_RE = re.compile("[\u0610-\u061a\u064b-\u065f\u0670\u06d6-\u06ed\u0640]")  # harakat, dagger alef, tatweel
_ARTICLES = ("وال", "فال", "بال", "كال", "ولل", "فلل", "ال", "لل")
_PROCLITICS = "وفبلك"
# Longest first; forms after LETTER_VARIANTS (ة is ه).
_SUFFIXES = ("هما", "كما", "ها", "هم", "هن", "كم", "نا", "ات", "ون", "ين", "ان", "يه", "ه", "ي")
_PRONOUNS = frozenset({"هما", "كما", "ها", "هم", "هن", "كم", "نا", "ه", "ي"})
_MIN_STEM = 2
_MIN_STEM_AFTER_SUFFIX = 3
_MIN_KEY = 2  # a single letter left over (a clitic written alone, an initial) matches too much to mean anything

# Normalized as `normalize_word` does (alef forms → ا, ى → ي, ة → ه). Prepositions, conjunctions, pronouns,
# demonstratives, relatives, question words, auxiliaries and frequent particles of Modern Standard Arabic.
STOPWORDS = frozenset(
    """في من الي علي عن مع او ام ثم حتي لكن بل لا لم لن ما ماذا متي اين كيف كم لماذا هل اي ايه ايها من
    هو هي هم هن هما انا نحن انت انتم انتن هذا هذه هذان هاتان هؤلاء ذلك تلك اولئك هناك هنا الذي التي الذين اللذان
    اللتان اللاتي اللواتي كان كانت كانوا يكون تكون كن قد لقد ان انه انها انما اذا اذ لو كل بعض غير بين عند عندما
    منذ خلال حول ضد عبر بعد قبل فوق تحت امام وراء حيث ايضا جدا فقط مثل لدي لها له لهم به بها فيه فيها منه منها عنه
    عنها اليه اليها عليه عليها ذات ذو تم يتم وقد وكان وكانت وهو وهي وفي ومن والتي والذي او سوف كما وما اما الا اول
    ثاني احد اسم يسمي تسمي يطلق سنه عام ال لل""".split()
)


def normalize_word(word: str) -> str:
    """Diacritics and tatweel removed, alef/yeh/teh-marbuta variants unified, punctuation stripped from the edges."""
    word = unicodedata.normalize("NFKC", word).lower()
    word = _DIACRITICS_RE.sub("", word).translate(LETTER_VARIANTS)
    # "+" is the segmentation marker of arabertv2 text ("ال+ كتاب +ها"): a marked clitic is its own word there.
    return word.strip(".,;:!?'\"()[]{}«»،؛؟-_/*…+")


@functools.lru_cache(maxsize=200_000)
def match_keys(word: str) -> frozenset[str]:
    """The keys a word matches on (two words match when their keys intersect); none for function words.

    "والمدينة", "المدينة", "مدينتها" all have the key "مدين": clitics go, the stem stays (a teh marbuta written ت
    before a pronoun goes with it). A one-letter proclitic cannot be told from a root letter ("وقت", "بيت"), so a word
    starting with و ف ب ل ك keeps a key with that letter and gets one without it. A clitic written as a word of its own
    ("+ها" in arabertv2 text) has no key.
    """
    if word.startswith("+") or word.endswith("+"):
        return frozenset()
    word = normalize_word(word)
    if not word or word in STOPWORDS or not any(c.isalnum() for c in word):
        return frozenset()
    stems = []
    for article in _ARTICLES:
        if word.startswith(article) and len(word) - len(article) >= _MIN_STEM:
            stems.append(word[len(article) :])
            break
    else:
        stems.append(word)
        if len(word) >= 4 and word[0] in _PROCLITICS:
            stems.append(word[1:])
    keys = set()
    for stem in stems:
        keys.add(stem)
        for suffix in _SUFFIXES:
            if stem.endswith(suffix) and len(stem) - len(suffix) >= _MIN_STEM_AFTER_SUFFIX:
                bare = stem[: -len(suffix)]
                if suffix in _PRONOUNS and bare.endswith("ت") and len(bare) > _MIN_STEM_AFTER_SUFFIX:
                    bare = bare[:-1]
                keys.add(bare)
                break
    return frozenset(key for key in keys if len(key) >= _MIN_KEY and key not in STOPWORDS)


def question_keys(question: str) -> frozenset[str]:
    return frozenset().union(*map(match_keys, question.split()))


def matching_word_spans(question: str, context: str) -> list[tuple[int, int]]:
    """Character spans of the context's whitespace-delimited words that share a key with a question word."""
    keys = question_keys(question)
    if not keys:
        return []
    return [(m.start(), m.end()) for m in re.finditer(r"\S+", context) if not keys.isdisjoint(match_keys(m.group()))]


# --------------------------------------------------------------------------------------------------------------------
# Sentence-level question overlap: the lexical baselines' and the decoding prior's signal

# The sentences are those Arabic-correct Sentence-Match scores (metrics.arabic_sentence_spans): the prior and the
# within-sentence limit aim at the sentence the metric asks for.
sentence_spans = arabic_sentence_spans


class KeyIDF:
    """Inverse document frequencies of match keys, counted over a collection of short documents (sentences)."""

    def __init__(self, document_frequency: dict[str, int], documents: int):
        self.document_frequency, self.documents = document_frequency, documents
        self.unseen = math.log((documents + 1) / 0.5)

    @classmethod
    def from_texts(cls, texts: Iterable[str]) -> KeyIDF:
        counts: collections.Counter = collections.Counter()
        documents = 0
        for text in texts:
            for start, end in sentence_spans(text):
                documents += 1
                counts.update(frozenset().union(*map(match_keys, text[start:end].split())))
        return cls(dict(counts), documents)

    def __call__(self, key: str) -> float:
        frequency = self.document_frequency.get(key)
        return self.unseen if frequency is None else math.log((self.documents + 1) / (frequency + 0.5))

    def to_json(self, min_frequency: int = 2) -> dict:
        """Keys seen once are left out: they score as unseen (the highest IDF), which they nearly are."""
        kept = {k: f for k, f in sorted(self.document_frequency.items()) if f >= min_frequency}
        return {"documents": self.documents, "document_frequency": kept}

    @classmethod
    def from_json(cls, data: dict) -> KeyIDF:
        """The table to_json wrote; a ValueError naming the field for anything else (a count that is no count would
        score every sentence NaN or fail deep inside decoding)."""
        documents, frequencies = data.get("documents"), data.get("document_frequency")
        if type(documents) is not int or documents < 0:
            raise ValueError(f"documents must be a non-negative integer, not {documents!r}")
        if not isinstance(frequencies, dict):
            raise ValueError("document_frequency must be an object {key: count}")
        for key, count in frequencies.items():
            if type(count) is not int or not 0 <= count <= documents:
                raise ValueError(f"document_frequency[{key!r}] must be an integer between 0 and documents "
                                 f"({documents}), not {count!r}")
        return cls(dict(frequencies), documents)


def sentence_overlap_scores(question: str, context: str, idf: KeyIDF,
                            spans: list[tuple[int, int]] | None = None) -> list[float]:
    """For each sentence of `context`, the IDF-weighted count of question keys it holds (each key once)."""
    keys = question_keys(question)
    scores = []
    for start, end in spans if spans is not None else sentence_spans(context):
        found = frozenset().union(*map(match_keys, context[start:end].split())) & keys
        scores.append(sum(idf(key) for key in found))
    return scores
