"""What questions are grouped by in reports: their question word and the length of their gold answer."""
from __future__ import annotations

from . import metrics

# Interrogatives as `metrics.arabic_normalize` leaves them (alef forms unified, ى → ي, ة → ه), with attached clitics.
QUESTION_WORDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "ما": ("ma (what)", ("ما", "ماذا", "ماهو", "ماهي", "مالذي", "بما", "بماذا", "مازا", "بمازا", "وما", "وماذا", "فما",
                         "عما", "مما", "بم")),
    "من": ("man (who)", ("من", "ومن", "لمن", "بمن", "ممن", "عمن")),
    "متى": ("mata (when)", ("متي", "ومتي")),
    "أين": ("ayna (where)", ("اين", "واين")),
    "كم": ("kam (how many)", ("كم", "وكم", "بكم")),
    "كيف": ("kayfa (how)", ("كيف", "وكيف")),
    "لماذا": ("limadha (why)", ("لماذا", "ولماذا")),
    "هل": ("hal (yes/no)", ("هل", "وهل")),
    "أي": ("ayy (which)", ("اي", "ايه", "باي", "لاي", "فاي", "واي")),
}
OTHER = "other"
ANSWER_LENGTH_BUCKETS = (("1", 1, 1), ("2", 2, 2), ("3", 3, 3), ("4-5", 4, 5), ("6-10", 6, 10), ("11+", 11, 10**9))


def question_word(question: str) -> str:
    """The interrogative a question asks with ("ما", "من", "متى", "أين", "كم", "كيف", "لماذا", "هل", "أي") or
    "other"."""
    tokens = metrics.arabic_normalize(question).split()
    for i, token in enumerate(tokens):
        for word, (_, forms) in QUESTION_WORDS.items():
            if token in forms:
                # "من أي ..." is "from which ...", not "who".
                if word == "من" and i + 1 < len(tokens) and tokens[i + 1] in QUESTION_WORDS["أي"][1]:
                    return "أي"
                return word
    return OTHER


def answer_length_bucket(answer: str) -> str:
    words = len(answer.split())
    return next((name for name, low, high in ANSWER_LENGTH_BUCKETS if low <= words <= high), "1")
