"""Typed cloze questions from one sentence, for make-synthetic-qa (synthetic.py, whose docstring gives the recipe):
the answer candidates of each type (dates, numbers with units; people, places and organisations from the corpus's
gazetteers) and the question made from the clause around one of them, the answer taken out and its question word in
front."""
from __future__ import annotations

import dataclasses
import re

ANSWER_TYPES = ("date", "number", "person", "place", "organisation")
QUESTION_WORDS = {"date": "متى", "number": "كم", "person": "من", "place": "أين", "organisation": "أي"}

_DIGITS = r"[0-9٠-٩]"
_NUMBER = rf"{_DIGITS}+(?:[.,٫]{_DIGITS}+)*"
_MONTHS = (
    "يناير|كانون الثاني|فبراير|شباط|مارس|آذار|أبريل|إبريل|ابريل|نيسان|مايو|أيار|يونيو|يونيه|حزيران|يوليو|يوليه|تموز|"
    "أغسطس|اغسطس|آب|سبتمبر|أيلول|أكتوبر|اكتوبر|تشرين الأول|نوفمبر|تشرين الثاني|ديسمبر|كانون الأول|"
    "محرم|صفر|ربيع الأول|ربيع الآخر|ربيع الثاني|جمادى الأولى|جمادى الآخرة|رجب|شعبان|رمضان|شوال|ذو القعدة|ذو الحجة"
)
_YEAR = r"(?:1[5-9][0-9]{2}|20[0-4][0-9])"
# Words that introduce a year or date in the sentence and go with it when the question is made.
_DATE_LEAD = r"(?:(?:[وف]?(?:في|منذ|خلال|حتى|بحلول|مطلع|أواخر|أوائل|نهاية|بداية|أواسط)\s+)?(?:(?:ال)?عام|سنة|العام)\s+)"
_ERA = r"(?P<era>\s+(?:م|هـ|ميلادية|ميلادي|هجرية|هجري)(?!\w))?"
# A bare year counts only after a word that makes it one (عام 2015), never alone (2015 could be a count).
_YEAR_RE = re.compile(rf"(?P<lead>{_DATE_LEAD})(?P<answer>{_YEAR})(?![0-9٠-٩]){_ERA}")
_DAY_RE = re.compile(
    rf"(?P<lead>[وف]?(?:في|منذ|حتى|بتاريخ)\s+)?"
    rf"(?P<answer>(?<![0-9٠-٩]){_DIGITS}{{1,2}}\s+(?:من\s+)?(?:شهر\s+)?(?:{_MONTHS})(?!\w)"
    rf"(?:\s+(?:من\s+)?(?:العام\s+|عام\s+)?{_YEAR}(?![0-9٠-٩]))?){_ERA}"
)
_SCALES = r"(?:ألف|آلاف|الف|مليون|ملايين|مليار|مليارات|بليون)"
_UNITS = (
    r"(?:دولار|دولارا|ريال|ريالا|درهم|درهما|دينار|دينارا|جنيه|جنيها|يورو|ليرة|متر|مترا|أمتار|كيلومتر|كيلومترا|كيلومترات"
    r"|كلم|كم|ميل|ميلا|طن|طنا|أطنان|برميل|برميلا|شخص|شخصا|أشخاص|قتيل|قتيلا|قتلى|جريح|جريحا|جرحى|طالب|طالبا|طلاب"
    r"|طالبة|زائر|زائرا|زوار|لاجئ|لاجئا|لاجئين|مواطن|مواطنا|عامل|عاملا|عمال|موظف|موظفا|سائح|سائحا|مقعدا|مقاعد"
    r"|هدفا|أهداف|نقطة|نقاط|درجة|درجات|هكتار|هكتارا|ميغاواط|مشروعا|مشاريع|مدرسة|مدارس|سيارة|سيارات|منزل|منزلا|وحدة"
    r"|وحدات|حالة|حالات|يوما|أيام|ساعة|ساعات|دقيقة|دقائق|شهرا|أشهر|سنوات|عاما|أعوام|مرة|مرات|دولة|دول|سريرا|أسرة)"
)
_NUMBER_RE = re.compile(
    rf"(?<![\w.,٫])(?P<answer>{_NUMBER}\s*(?:%|٪|\s(?:بالمئة|بالمائة|في المئة|في المائة)(?!\w))"
    rf"|{_NUMBER}\s+(?:{_SCALES}\s+)?{_UNITS}(?!\w)|{_NUMBER}\s+{_SCALES}(?:\s+{_UNITS})?(?!\w))"
)
_TITLES = frozenset(
    "الرئيس الملك الأمير الأميرة الشيخ الشيخة الدكتور الدكتورة السيد السيدة الوزير الوزيرة وزير وزيرة رئيس رئيسة "
    "المهندس اللاعب اللاعبة المدرب النجم النجمة الفنان الفنانة الكاتب الكاتبة الشاعر الشاعرة الروائي المخرج العقيد "
    "اللواء العميد الجنرال المشير المستشار النائب النائبة المتحدث الناطق السفير السفيرة الإمام البابا القاضي "
    "المحامي الصحفي الصحفية الأستاذ الأستاذة البروفيسور المفتي المطرب المطربة الممثل الممثلة المغني المغنية الداعية "
    "المرشح المرشحة زعيم الزعيم قائد القائد محافظ المحافظ مدير المدير مديرة عمدة حاكم الحاكم".split()
)
_PLACE_NOUNS = frozenset("مدينة محافظة منطقة ولاية إقليم جزيرة قرية بلدة العاصمة عاصمة مقاطعة إمارة مملكة".split())
_ORG_NOUNS = frozenset(
    "وزارة شركة جامعة هيئة منظمة مجلس نادي بنك مصرف مؤسسة جمعية حزب صحيفة وكالة مستشفى حركة اتحاد صندوق مركز كلية "
    "معهد محكمة مجموعة جماعة لجنة جهاز مجمع".split()
)
# Prepositions after which a place answers أين; a one-letter clitic ب / ل on the place itself is handled separately.
_LOCATIVES = frozenset("في وفي إلى وإلى الى من ومن داخل قرب بالقرب شمال جنوب شرق غرب شمالي جنوبي شرقي غربي".split())
# Words that end a name or an organisation phrase, and sentence openers that a question drops.
_STOP = frozenset(
    "في من إلى الى على عن مع أن إن أنه إنه أنها إنها الذي التي الذين اللذين هذا هذه ذلك تلك وقد قد كما لقد بعد قبل "
    "خلال حيث التي بين أو و ثم لكن بل لا لم لن ما ماذا كان كانت يكون تكون هو هي هم وهو وهي عند عندما حتى منذ وفق "
    "وفقا بن بنت أبو أبي ابن عبر ضمن لدى تجاه نحو وذلك إلا غير كل بعض أي أمام خلف فوق تحت دون سوى اليوم أمس غدا "
    "الأحد الاثنين الإثنين الثلاثاء الأربعاء الخميس الجمعة السبت".split()
)
_OPENERS = frozenset("و وقد كما فيما بينما حيث".split())
_VERB_OPENERS = {"وأضاف": "أضاف", "وأكد": "أكد", "وأوضح": "أوضح", "وأشار": "أشار", "وقال": "قال", "وقالت": "قالت",
                 "ولفت": "لفت", "وكان": "كان", "وكانت": "كانت"}
# A name next to these is part of a longer one (متعب بن عبد الله بن عبد العزيز): cutting it out would leave half.
_NAME_LINKS = frozenset("بن بنت ابن ابنة أبو أبي أم آل".split())
_SENTENCE_END = re.compile(r"(?<=[.!?؟؛])\s+")
_CLAUSE_BREAK = re.compile(r"[،,:؛;«»\"“”()]")
_PUNCT = "\"'«»“”‘’()[]{}،,:;؛.!?؟-–—…"
_ARABIC_WORD = re.compile(r"^[\u0621-\u064a\u0671-\u06d3]+$")


def _strip_clitic(word: str) -> str:
    """A title or noun with a conjunction or preposition letter in front (والرئيس, للوزير) reads as the bare word."""
    for prefix in ("وال", "فال", "بال", "كال"):
        if word.startswith(prefix) and len(word) > 4:
            return "ال" + word[3:]
    if word.startswith("لل") and len(word) > 4:
        return "ال" + word[2:]
    if word[:1] in "وفبل" and len(word) > 3 and word[1:] in _TITLES | _PLACE_NOUNS | _ORG_NOUNS:
        return word[1:]
    return word


def _clean(word: str) -> str:
    return word.strip(_PUNCT)


# --------------------------------------------------------------------------------------------- gazetteers


@dataclasses.dataclass
class Gazetteers:
    """Names, places and organisations read off the corpus: phrase (a tuple of words) → type."""

    person: set[tuple[str, ...]]
    place: set[tuple[str, ...]]
    organisation: set[tuple[str, ...]]

    def sizes(self) -> dict[str, int]:
        return {"person": len(self.person), "place": len(self.place), "organisation": len(self.organisation)}

    def to_json(self) -> dict[str, list[str]]:
        return {kind: sorted(" ".join(p) for p in getattr(self, kind)) for kind in ("person", "place", "organisation")}

    @classmethod
    def from_json(cls, data: dict[str, list[str]]) -> Gazetteers:
        return cls(**{kind: {tuple(p.split()) for p in data[kind]} for kind in ("person", "place", "organisation")})


def _name_after(words: list[str], start: int) -> list[str]:
    """The words of a name starting at `start` (after a title and its adjectives), at most 3, stopping at punctuation
    and function words."""
    name: list[str] = []
    for raw in words[start : start + 3]:
        word = _clean(raw)
        if not word or not _ARABIC_WORD.match(word) or word in _STOP:
            break
        name.append(word)
        if raw[-1:] in _PUNCT:
            break
    return name


# --------------------------------------------------------------------------------------------- answers and questions


@dataclasses.dataclass
class Candidate:
    type: str
    answer: str  # as written in the sentence
    start: int  # character span of the answer in the sentence
    end: int
    cut_start: int  # the span taken out of the question: the answer with its lead words (في عام, في مدينة ...)
    cut_end: int
    head: str = ""  # organisation: the noun that follows أي (وزارة)


def _word_spans(sentence: str) -> list[tuple[int, int]]:
    return [m.span() for m in re.finditer(r"\S+", sentence)]


def _gazetteer_candidates(sentence: str, gazetteers: Gazetteers, types: tuple[str, ...]) -> list[Candidate]:
    spans = _word_spans(sentence)
    words = [_clean(sentence[s:e]) for s, e in spans]
    found: list[Candidate] = []
    i = 0
    while i < len(words):
        matched = False
        for n in (3, 2, 1):
            if i + n > len(words):
                continue
            phrase = tuple(words[i : i + n])
            bare = (_strip_clitic(phrase[0]), *phrase[1:])
            start, end = spans[i][0], spans[i + n - 1][1]
            end -= len(sentence[start:end]) - len(sentence[start:end].rstrip(_PUNCT))
            start += len(sentence[start:end]) - len(sentence[start:end].lstrip(_PUNCT))
            inside_longer_name = (i > 0 and words[i - 1] in _NAME_LINKS) or (
                i + n < len(words) and words[i + n] in _NAME_LINKS)
            if "person" in types and n >= 2 and phrase in gazetteers.person and not inside_longer_name:
                # A title just before the name stays in the question (وزير الصحة ...): it tells the reader who.
                found.append(Candidate("person", sentence[start:end], start, end, start, end))
            elif "organisation" in types and n >= 2 and bare in gazetteers.organisation:
                prefix = len(phrase[0]) - len(bare[0]) if bare[0] != phrase[0] and not bare[0].startswith("ال") else 0
                a_start = start + prefix
                found.append(Candidate("organisation", sentence[a_start:end], a_start, end, a_start, end,
                                       head=bare[0]))
            elif "place" in types and n == 1 and phrase in gazetteers.place and i > 0:
                before = _strip_clitic(words[i - 1])
                lead = i - 1
                if before in _PLACE_NOUNS and i > 1:  # في مدينة جدة: the preposition is one word further back
                    lead, before = i - 2, words[i - 2]
                if before in _LOCATIVES:
                    found.append(Candidate("place", sentence[start:end], start, end, spans[lead][0], end))
                else:
                    continue
            else:
                continue
            i += n
            matched = True
            break
        if not matched:
            i += 1
    return found


def find_candidates(sentence: str, gazetteers: Gazetteers, types: tuple[str, ...]) -> list[Candidate]:
    """Every typed answer in one sentence, spans not overlapping (dates and numbers first: a year is not a count)."""
    found: list[Candidate] = []
    if "date" in types:
        for m in [*_DAY_RE.finditer(sentence), *_YEAR_RE.finditer(sentence)]:
            cut_start = m.start("lead") if m.group("lead") else m.start("answer")
            cut_end = m.end("era") if m.group("era") else m.end("answer")
            found.append(Candidate("date", m.group("answer"), m.start("answer"), m.end("answer"), cut_start, cut_end))
    if "number" in types:
        for m in _NUMBER_RE.finditer(sentence):
            found.append(Candidate("number", m.group("answer"), m.start("answer"), m.end("answer"),
                                   m.start("answer"), m.end("answer")))
    found += _gazetteer_candidates(sentence, gazetteers, types)
    kept: list[Candidate] = []
    for candidate in found:  # first come first kept: dates, then numbers, then names
        if all(candidate.cut_end <= k.cut_start or candidate.cut_start >= k.cut_end for k in kept):
            kept.append(candidate)
    return kept


def make_question(sentence: str, candidate: Candidate, clause_words: int) -> str | None:
    """The clause around the answer with the answer taken out and the question word in front; None if too little is
    left to ask anything."""
    before = _CLAUSE_BREAK.split(sentence[: candidate.cut_start])
    after = _CLAUSE_BREAK.split(sentence[candidate.cut_end :])
    # The answer's own clause; the one before it too when the answer opens its clause (…، وفي عام 2011 قرر …).
    left = before[-1].split()
    if len(left) < 2 and len(before) > 1:
        left = before[-2].split() + left
    left, right = left[-clause_words:], after[0].split()[:clause_words]
    while left and (left[0] in _OPENERS or left[0] in _STOP):
        left = left[1:]
    if left and left[0] in _VERB_OPENERS:
        left[0] = _VERB_OPENERS[left[0]]
    words = [w.strip(_PUNCT) for w in left + right]
    words = [w for w in words if w]
    while words and words[-1] in _STOP:
        words.pop()
    if len(words) < 3:
        return None
    lead = QUESTION_WORDS[candidate.type]
    if candidate.type == "organisation":
        lead = f"أي {candidate.head}"
    return f"{lead} {' '.join(words)}؟"


def _normalized(text: str) -> str:
    from .leakage import normalize

    return normalize(text)


def _find_whole_words(text: str, answer: str) -> int:
    """Offset of `answer` in `text` as whole words (a one-letter clitic و ف ب ل ك may precede it), or -1."""
    for m in re.finditer(re.escape(answer), text):
        before = text[max(0, m.start() - 2) : m.start()]
        after = text[m.end() : m.end() + 1]
        starts_word = m.start() == 0 or not before[-1:].isalnum() or (
            before[-1:] in "وفبلك" and (m.start() == 1 or not before[:1].isalnum()))
        if starts_word and not after.isalnum():
            return m.start()
    return -1
