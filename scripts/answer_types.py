"""Does a QA system answer with the right *kind* of thing? Per question word, on the questions of some SQuAD sets:
how often the predicted answer and the gold answer hold a number or a date, how long they are, and the F1.

    python scripts/answer_types.py REPORT_DIR --data arcd-dev mlqa-ar-dev [--label LABEL ...] [-o TABLE.md]

REPORT_DIR is an `arabert-pipeline evaluate` output (its predictions/*.json, one file a system); a prediction file can
be given instead. A number is any digit (Arabic-Indic too); a date is a year-like number (1500-2049) or a month name.
The issue this measures: a small model answered متى with a place, كم with a height, and gave answers twice the gold's
length; the table makes such confusions countable before and after a change.
"""
from __future__ import annotations

import argparse
import collections
import json
import re
import sys
from pathlib import Path

QUESTION_WORDS = ("متى", "كم", "من", "أين", "ما", "ماذا", "لماذا", "كيف", "هل", "أي")
_MONTHS = ("يناير|فبراير|مارس|أبريل|إبريل|ابريل|مايو|يونيو|يوليو|أغسطس|اغسطس|سبتمبر|أكتوبر|اكتوبر|نوفمبر|ديسمبر|"
           "كانون|شباط|آذار|نيسان|أيار|حزيران|تموز|آب|أيلول|تشرين|محرم|صفر|ربيع|جمادى|رجب|شعبان|رمضان|شوال|القعدة|الحجة")
_DATE = re.compile(rf"(?<![0-9٠-٩])(?:1[5-9][0-9]{{2}}|20[0-4][0-9]|[١][٥-٩][٠-٩]{{2}}|٢٠[٠-٤][٠-٩])(?![0-9٠-٩])"
                   rf"|{_MONTHS}")
_NUMBER = re.compile(r"[0-9٠-٩]")
_ARTICLE_PREFIXES = ("و", "ف", "ب", "ل", "ك")


def question_word(question: str) -> str:
    for word in question.replace("؟", " ").split()[:3]:
        bare = word[1:] if word[:1] in _ARTICLE_PREFIXES and word[1:] in QUESTION_WORDS else word
        if bare in QUESTION_WORDS:
            return "ما" if bare == "ماذا" else bare
    return "other"


def kind(text: str) -> str:
    if not text:
        return "none"
    if _DATE.search(text):
        return "date"
    if _NUMBER.search(text):
        return "number"
    return "words"


def table(examples: list[dict], predictions: dict[str, dict]) -> list[dict]:
    from arabert_pipeline.qa.metrics import score_question

    groups: dict[str, list[dict]] = collections.defaultdict(list)
    for example in examples:
        found = predictions.get(example["id"]) or {}
        text = found.get("text") or ""
        scores = score_question(example, text or None, found.get("start"))
        gold = example["answers"]["text"][0]
        groups[question_word(example["question"])].append({
            "gold_kind": kind(gold), "kind": kind(text), "words": len(text.split()), "gold_words": len(gold.split()),
            "f1": scores["soqal_f1"],
        })
    rows = []
    for word in [*QUESTION_WORDS, "other"]:
        items = groups.get(word)
        if not items:
            continue
        n = len(items)
        rows.append({
            "question_word": word, "questions": n,
            "gold_number_or_date": 100 * sum(i["gold_kind"] in ("number", "date") for i in items) / n,
            "pred_number_or_date": 100 * sum(i["kind"] in ("number", "date") for i in items) / n,
            "same_kind": 100 * sum(i["kind"] == i["gold_kind"] for i in items) / n,
            "pred_words": sum(i["words"] for i in items) / n, "gold_words": sum(i["gold_words"] for i in items) / n,
            "f1": 100 * sum(i["f1"] for i in items) / n,
        })
    return rows


def main(argv: list[str] | None = None) -> int:
    from arabert_pipeline.qa.data import read_squad

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", help="an evaluate output directory or a predictions JSON file")
    parser.add_argument("--data", nargs="+", required=True, help="the SQuAD sets the predictions answer")
    parser.add_argument("--label", nargs="*", help="systems to show (predictions file stems); default all")
    parser.add_argument("-o", "--output", help="write the Markdown table here (atomically) instead of stdout")
    args = parser.parse_args(argv)
    source = Path(args.source)
    files = sorted((source / "predictions").glob("*.json")) if source.is_dir() else [source]
    if args.label:
        files = [f for f in files if f.stem in args.label]
    if not files:
        print(f"{source}: no predictions files", file=sys.stderr)
        return 2
    examples = [e for name in args.data for e in read_squad(name, misaligned="keep").examples]
    lines = ["| system | question word | n | gold is number/date % | answer is number/date % | same kind % | "
             "answer words | gold words | F1 (SOQAL) |", "|---|---|---|---|---|---|---|---|---|"]
    for path in files:
        predictions = json.loads(path.read_text(encoding="utf-8"))
        for row in table(examples, predictions):
            lines.append(f"| {path.stem} | {row['question_word']} | {row['questions']} | "
                         f"{row['gold_number_or_date']:.0f} | {row['pred_number_or_date']:.0f} | "
                         f"{row['same_kind']:.0f} | {row['pred_words']:.1f} | {row['gold_words']:.1f} | "
                         f"{row['f1']:.1f} |")
    text = "\n".join(lines) + "\n"
    if args.output:
        from arabert_pipeline.artifacts.writes import atomic_write

        with atomic_write(args.output) as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
