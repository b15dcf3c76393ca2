"""The paragraphs of QA training sets as a pretraining corpus: task-adaptive pretraining (Gururangan et al. 2020),
i.e. more MLM on the task's own unlabelled text between pretraining and fine-tuning.

    arabert-pipeline export-contexts --train arcd-train-rest xquad-ar \\
        --hold-out arcd-dev mlqa-ar-dev arcd-test tydiqa-goldp-ar-dev -o runs/tapt/contexts.txt
    arabert-pipeline preprocess runs/tapt/contexts.txt -o runs/tapt/contexts.arabertv02.txt --preprocessing arabertv02
    arabert-pipeline pretrain --init-from runs/pretrain/deberta-mlm --corpus runs/tapt/contexts.arabertv02.txt ...

Only the contexts are written, never questions or answers. A paragraph that the leakage guard (qa/leakage.py, its
context rule) finds in a --hold-out set is left out: MLM on a test paragraph is test-set training too. The output is
the corpus format `preprocess` and `pretrain` read: one paragraph per line (its own line breaks made spaces), a blank
line between articles (a new article wherever the title changes), each paragraph once (compared after the leakage
guard's normalization, so a copy with other spacing or diacritics is not written again), in the order the training
sets give them.
"""
from __future__ import annotations

import dataclasses
import os

from ..artifacts.writes import atomic_write
from ..errors import ConfigError
from ..outputs import claim_output_file


@dataclasses.dataclass
class ContextsReport:
    paragraphs: int  # written
    articles: int
    words: int
    held_out: int  # paragraphs left out because a --hold-out set has them


def export_contexts(train: list[str], hold_out: list[str], output: str | os.PathLike, *,
                    overwrite: bool = False) -> ContextsReport:
    """Write the paragraphs of the `train` sets (files or registry names) minus those of the `hold_out` sets."""
    from .data import read_squad, resolve
    from .leakage import find_leakage, normalize

    if not train:
        raise ConfigError("no training sets: give --train")
    claim_output_file(output, verb="export-contexts", inputs=[resolve(s) for s in [*train, *hold_out]],
                      overwrite=overwrite)
    # Per source, so that question ids only need to be unique within their own file.
    sets = [(source, read_squad(source, misaligned="keep").examples) for source in train]
    evaluation = [(source, read_squad(source, misaligned="keep").examples) for source in hold_out]
    leaking = {(leak.train_set, train_id) for leak in find_leakage(sets, evaluation).leaks if leak.kind == "context"
               for train_id in leak.train_ids}
    articles: list[list[str]] = []
    seen: set[str] = set()
    held_out: set[str] = set()
    for source, examples in sets:
        previous_title = None
        for example in examples:
            key = normalize(example["context"])  # the same paragraph with other spacing or diacritics is no new text
            if (source, example["id"]) in leaking:
                held_out.add(key)
            if key in seen or key in held_out:
                continue
            seen.add(key)
            if example["title"] != previous_title or not articles:
                articles.append([])
                previous_title = example["title"]
            articles[-1].append(" ".join(example["context"].split()))
    if not articles:
        raise ConfigError("no paragraph is left to write: every training context is also in a --hold-out set")
    with atomic_write(output) as f:
        f.write("\n\n".join("\n".join(paragraphs) for paragraphs in articles) + "\n")
    paragraphs = [p for ps in articles for p in ps]
    return ContextsReport(paragraphs=len(paragraphs), articles=len(articles),
                          words=sum(len(p.split()) for p in paragraphs), held_out=len(held_out))
