"""What questions are grouped by in reports: their question word and the length of their gold answer; and the
per-question records that carry them beside the scores (`score_system`), which every QA report is built from."""
from __future__ import annotations

from collections.abc import Mapping

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


def score_system(examples: list[dict], predictions: Mapping[str, tuple[str, int | None]]) -> list[dict]:
    """Per-question records: prediction, gold answers, buckets and the six scores."""
    records = []
    for ex in examples:
        text, start = predictions.get(ex["id"], (None, None))
        gold = list(ex["answers"]["text"])
        records.append({
            "id": ex["id"],
            "prediction": text,
            "prediction_start": start,
            "missing": text is None,
            "gold": gold,
            "question_word": question_word(ex["question"]),
            "answer_length": answer_length_bucket(gold[0]),
            **metrics.score_question(ex, text, start),
        })
    return records
