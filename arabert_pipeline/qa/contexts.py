"""The paragraphs of QA training sets as a pretraining corpus: task-adaptive pretraining (Gururangan et al. 2020),
i.e. more MLM on the task's own unlabelled text between pretraining and fine-tuning.

    arabert-pipeline export-contexts --train arcd-train-rest xquad-ar \\
        --hold-out arcd-dev mlqa-ar-dev arcd-test tydiqa-goldp-ar-dev -o runs/tapt/contexts.txt
    arabert-pipeline preprocess runs/tapt/contexts.txt -o runs/tapt/contexts.arabertv02.txt --preprocessing arabertv02
    arabert-pipeline pretrain --init-from runs/pretrain/deberta --corpus runs/tapt/contexts.arabertv02.txt ...

Only the contexts are written, never questions or answers. A paragraph that the leakage guard (qa/leakage.py, its
context rule) finds in a --hold-out set is left out: MLM on a test paragraph is test-set training too. The output is
the corpus format `preprocess` and `pretrain` read: one paragraph per line (its own line breaks made spaces), a blank
line between articles, each paragraph once, in the order the training sets give them.
"""
from __future__ import annotations

import dataclasses
import os

from ..artifacts import atomic_write, claim_output_file
from ..errors import ConfigError


@dataclasses.dataclass
class ContextsReport:
    paragraphs: int  # written
    articles: int
    words: int
    held_out: int  # paragraphs left out because a --hold-out set has them


def export_contexts(train: list[str], hold_out: list[str], output: str | os.PathLike, *,
                    overwrite: bool = False) -> ContextsReport:
    """Write the paragraphs of the `train` sets (files or registry names) minus those of the `hold_out` sets."""
    from .data import read_squad
    from .leakage import find_leakage

    if not train:
        raise ConfigError("no training sets: give --train")
    claim_output_file(output, verb="export-contexts", inputs=[s for s in [*train, *hold_out] if os.path.exists(s)],
                      overwrite=overwrite)
    examples = [e for source in train for e in read_squad(source, misaligned="keep").examples]
    evaluation = [(source, read_squad(source, misaligned="keep").examples) for source in hold_out]
    leaking_ids = {train_id for leak in find_leakage([("train", examples)], evaluation).leaks
                   if leak.kind == "context" for train_id in leak.train_ids}
    held_out = {e["context"] for e in examples if e["id"] in leaking_ids}
    articles: dict[str, list[str]] = {}
    seen: set[str] = set()
    for example in examples:
        context = example["context"]
        if context in seen or context in held_out:
            continue
        seen.add(context)
        paragraph = " ".join(context.split())
        if paragraph:
            articles.setdefault(example["title"], []).append(paragraph)
    if not articles:
        raise ConfigError("no paragraph is left to write: every training context is also in a --hold-out set")
    with atomic_write(output) as f:
        f.write("\n\n".join("\n".join(paragraphs) for paragraphs in articles.values()) + "\n")
    paragraphs = [p for ps in articles.values() for p in ps]
    return ContextsReport(paragraphs=len(paragraphs), articles=len(articles),
                          words=sum(len(p.split()) for p in paragraphs), held_out=len(held_out))
