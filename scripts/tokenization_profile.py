"""What each tokenizer of a comparison does to the QA data, measured on the evaluation sets themselves (issue 29: which
property explains a difference between systems that differ only in preprocessing + tokenizer):

- tokens per word: context tokens per whitespace word of the original context;
- one window: questions whose question + context fit one window of --max-seq-length tokens (the rest are read in
  overlapping windows, where the answer's window may lack the sentence that locates it);
- exact in tokens: gold answers that some token span maps back to exactly (through the preprocessing's offsets): the
  EM a perfect span picker could reach before answers are widened to whole words;
- starts inside a word: gold answers whose first token begins inside an original word (a clitic split off by
  segmentation or a subword): such an answer can be exact only without Pipeline's whole-word widening.

    python scripts/tokenization_profile.py --tokenizer seg-unigram=runs/tokenizers/seg-unigram \\
        --tokenizer mbert-vocab=runs/tokenizers/mbert-vocab --data arcd-test tydiqa-goldp-ar-dev > tokenization.md

Prints a Markdown table. The tokenizer's preprocessing is read from its arabert_pipeline.json (`none` when absent).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from arabert_pipeline.artifacts import load_pretrained_tokenizer, read_metadata
from arabert_pipeline.qa.align import QAPreprocessing, align_examples
from arabert_pipeline.qa.data import read_squad


def profile(tokenizer_dir: str, examples: list[dict], max_seq_length: int) -> dict[str, float]:
    tokenizer = load_pretrained_tokenizer(tokenizer_dir)
    preprocessing = read_metadata(tokenizer_dir, missing_ok=True).get("preprocessing", "none")
    aligned_examples, _ = align_examples(examples, QAPreprocessing(preprocessing))
    contexts = {}
    for example in aligned_examples:
        aligned = example["aligned"]
        if aligned.original not in contexts:
            encoded = tokenizer(aligned.text, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
            offsets = np.asarray([o for o in encoded["offset_mapping"] if o[1] > o[0]], dtype=np.int64).reshape(-1, 2)
            contexts[aligned.original] = offsets
    words = sum(len(original.split()) for original in contexts)
    tokens = sum(len(offsets) for offsets in contexts.values())
    one_window = exact = inside = answers = 0
    for example in aligned_examples:
        aligned, offsets = example["aligned"], contexts[example["aligned"].original]
        question_tokens = len(tokenizer(example["question"], add_special_tokens=False, verbose=False)["input_ids"])
        one_window += question_tokens + len(offsets) + 3 <= max_seq_length
        original = aligned.original
        for start, end in example["spans"]:
            covering = np.flatnonzero((offsets[:, 0] < end) & (offsets[:, 1] > start))
            if covering.size == 0:
                continue
            answers += 1
            first, last = aligned.to_original(int(offsets[covering[0], 0]), int(offsets[covering[-1], 1]))
            wanted = aligned.to_original(start, end)
            exact += (first, last) == wanted
            inside += first > 0 and not original[first - 1].isspace() and original[first - 1].isalnum()
    n = len(aligned_examples)
    return {"preprocessing": preprocessing, "tokens per word": tokens / max(1, words),
            "one window (%)": 100 * one_window / max(1, n), "exact in tokens (%)": 100 * exact / max(1, answers),
            "starts inside a word (%)": 100 * inside / max(1, answers), "questions": n, "answers": answers}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokenizer", action="append", required=True, metavar="LABEL=DIR")
    parser.add_argument("--data", nargs="+", required=True, metavar="FILE_OR_NAME")
    parser.add_argument("--max-seq-length", type=int, default=256)
    args = parser.parse_args(argv)
    sets = {name: read_squad(name, misaligned="keep").examples for name in args.data}
    columns = ["preprocessing", "tokens per word", "one window (%)", "exact in tokens (%)", "starts inside a word (%)"]
    print(f"Tokenization of the evaluation contexts and gold answers (windows of {args.max_seq_length} tokens; "
          "`scripts/tokenization_profile.py`).\n")
    print("| data | tokenizer | " + " | ".join(columns) + " |")
    print("|---" * (len(columns) + 2) + "|")
    for name, examples in sets.items():
        for pair in args.tokenizer:
            label, _, directory = pair.partition("=")
            if not directory:
                parser.error(f"--tokenizer {pair}: expected LABEL=DIR")
            row = profile(directory, examples, args.max_seq_length)
            cells = [row["preprocessing"]] + [f"{row[c]:.2f}" if c == "tokens per word" else f"{row[c]:.1f}"
                                              for c in columns[1:]]
            print(f"| {Path(name).name} ({row['answers']} answers) | {label} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
