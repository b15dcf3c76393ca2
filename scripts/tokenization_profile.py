"""What each tokenizer of a comparison does to the QA data, measured on the evaluation sets themselves (issue 29: which
property explains a difference between systems that differ only in preprocessing + tokenizer):

- tokens per word: context tokens per whitespace word of the original context;
- one window: questions whose question (cut at --max-question-tokens, as fine-tuning cuts it) + context fit one
  window of --max-seq-length tokens; the others are read in overlapping windows, where the answer's window may lack
  the sentence that locates it;
- exact in tokens: gold answers whose covering tokens map back, through the preprocessing's offsets, to exactly the
  gold span (edge spaces aside): the EM a perfect span picker could reach before answers are widened to whole words.
  Answers the preprocessing cannot align count as not exact;
- starts inside a word: gold answers whose first covering token begins inside an original word (after a letter,
  mark or digit: a clitic split off by segmentation or a subword); such an answer loses its exactness to Pipeline's
  whole-word widening.

    python scripts/tokenization_profile.py --tokenizer seg-unigram=runs/tokenizers/seg-unigram \\
        --tokenizer mbert-vocab=runs/tokenizers/mbert-vocab --data arcd-test tydiqa-goldp-ar-dev -o tokenization.md

Writes a Markdown table (to stdout without -o). The tokenizer's preprocessing is read from its arabert_pipeline.json
(`none` when absent).
"""
from __future__ import annotations

import argparse
import sys
import unicodedata
from pathlib import Path

import numpy as np

from arabert_pipeline.artifacts.metadata import read_metadata
from arabert_pipeline.artifacts.writes import atomic_write
from arabert_pipeline.errors import ArabertPipelineError
from arabert_pipeline.qa.align import QAPreprocessing
from arabert_pipeline.qa.data import read_squad
from arabert_pipeline.tokenizer.load import load_pretrained_tokenizer

COLUMNS = ("preprocessing", "tokens per word", "one window (%)", "exact in tokens (%)", "starts inside a word (%)")


def profile(tokenizer_dir: str, examples: list[dict], max_seq_length: int, max_question_tokens: int) -> dict:
    tokenizer = load_pretrained_tokenizer(tokenizer_dir)
    preprocessing = read_metadata(tokenizer_dir, missing_ok=True).get("preprocessing", "none")
    qa_preprocessing = QAPreprocessing(preprocessing)
    offsets_of: dict[str, np.ndarray] = {}
    one_window = exact = inside = answers = 0
    for example in examples:
        context = example["context"]
        aligned = qa_preprocessing.context(context)
        if context not in offsets_of:
            encoded = tokenizer(aligned.text, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
            offsets_of[context] = np.asarray(encoded["offset_mapping"], dtype=np.int64).reshape(-1, 2)
        offsets = offsets_of[context]
        question = tokenizer(qa_preprocessing.question(example["question"]), add_special_tokens=False,
                             verbose=False)["input_ids"]
        one_window += min(len(question), max_question_tokens) + len(offsets) + 3 <= max_seq_length
        for text, start in zip(example["answers"]["text"], example["answers"]["answer_start"], strict=True):
            if context[start:start + len(text)] != text:  # not in its context: no span could be exact
                continue
            answers += 1
            span = aligned.to_preprocessed(start, start + len(text))
            if span is None:
                continue
            covering = np.flatnonzero((offsets[:, 0] < span[1]) & (offsets[:, 1] > span[0]))
            if covering.size == 0:
                continue
            first, last = aligned.to_original(int(offsets[covering[0], 0]), int(offsets[covering[-1], 1]))
            exact += (first, last) == _trimmed(context, start, start + len(text))
            inside += first > 0 and unicodedata.category(context[first - 1])[0] in "LMN"
    words = sum(len(context.split()) for context in offsets_of)
    tokens = sum(len(offsets) for offsets in offsets_of.values())
    percent = lambda count, total: 100 * count / total if total else None  # noqa: E731  a one-line local helper
    return {"preprocessing": preprocessing, "tokens per word": tokens / words if words else None,
            "one window (%)": percent(one_window, len(examples)), "exact in tokens (%)": percent(exact, answers),
            "starts inside a word (%)": percent(inside, answers), "answers": answers}


def _trimmed(text: str, start: int, end: int) -> tuple[int, int]:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def table(tokenizers: list[tuple[str, str]], data: list[str], max_seq_length: int, max_question_tokens: int) -> str:
    lines = [f"Tokenization of the evaluation contexts and gold answers (windows of {max_seq_length} tokens, questions "
             f"cut at {max_question_tokens}; `scripts/tokenization_profile.py`).", "",
             "| data | tokenizer | " + " | ".join(COLUMNS) + " |", "|---" * (len(COLUMNS) + 2) + "|"]
    for name in data:
        examples = read_squad(name, misaligned="keep").examples
        for label, directory in tokenizers:
            row = profile(directory, examples, max_seq_length, max_question_tokens)
            cells = [row["preprocessing"]]
            for column in COLUMNS[1:]:
                value = row[column]
                cells.append("n/a" if value is None else f"{value:.2f}" if column == "tokens per word" else
                             f"{value:.1f}")
            lines.append(f"| {Path(name).name} ({len(examples)} questions, {row['answers']} answers) | {label} | "
                         + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokenizer", action="append", required=True, metavar="LABEL=DIR")
    parser.add_argument("--data", nargs="+", required=True, metavar="FILE_OR_NAME")
    parser.add_argument("--max-seq-length", type=int, default=256, help="the QA window, as fine-tuning's")
    parser.add_argument("--max-question-tokens", type=int, default=64, help="as fine-tuning's")
    parser.add_argument("-o", "--output", metavar="FILE.md", help="write the table here (atomically)")
    args = parser.parse_args(argv)
    tokenizers = []
    for pair in args.tokenizer:
        label, _, directory = pair.partition("=")
        if not label or not directory:
            parser.error(f"--tokenizer {pair}: expected LABEL=DIR")
        tokenizers.append((label, directory))
    try:
        text = table(tokenizers, args.data, args.max_seq_length, args.max_question_tokens)
        if args.output is None:
            sys.stdout.write(text)
        else:
            with atomic_write(args.output) as f:
                f.write(text)
    except (ArabertPipelineError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
