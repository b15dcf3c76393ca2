"""Reading the labelled sets of a fine-tuning run, as every task reads them: its training, dev, evaluation and held-out
sets through the task's own reader, the rows each reader skipped or kept reported, and the leakage guard's policy
applied to the training sets.

Dev and held-out sets are guarded like evaluation sets: a training example that leaks into any of them (the task's
leakage report says which) is refused (policy "refuse": the run stops and says how to go on), dropped ("drop": counted
per training set) or kept ("allow": the scores on those sets are inflated, and the run says so).

A task's reader takes (source, policy for bad rows) and returns an object with `name`, `path`, `examples` (dicts
with an "id"), `misaligned` (the rows it skipped or kept) and `describe_misaligned()`: qa.data.SquadFile for QA.
Its leakage finder takes [(set name, examples)] for training and for the guarded sets and returns a report with
`clean`, `summary()` and `train_ids()` ({(training set name, example id)}): qa.leakage.find_leakage.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import ConfigError

LEAKAGE_POLICIES = ("refuse", "drop", "allow")


@dataclasses.dataclass
class LabelledSets:
    """The sets of one run and the training examples the leakage policy keeps."""

    train: list[Any]
    dev: list[Any]
    eval: list[Any]
    hold_out: list[Any]
    leakage: Any  # the task's leakage report (train against dev + eval + hold_out)
    policy: str  # one of LEAKAGE_POLICIES
    examples: list[dict]  # the training examples kept, in the order of the training sets
    dropped: dict[str, int]  # training set name → examples dropped for leakage


def leakage_policy(*, allow_leakage: bool, drop_leaking_train: bool) -> str:
    """The policy the flags --allow-leakage and --drop-leaking-train name."""
    if allow_leakage and drop_leaking_train:
        raise ConfigError("choose one of --allow-leakage and --drop-leaking-train")
    return "allow" if allow_leakage else "drop" if drop_leaking_train else "refuse"


def read_labelled_sets(read: Callable[[str, str], Any], find_leakage: Callable, *, train: Sequence[str],
                       dev: Sequence[str] = (), eval: Sequence[str] = (), hold_out: Sequence[str] = (),
                       train_policy: str = "error", policy: str = "refuse",
                       say: Callable[[str], None] = print, unit: str = "questions") -> LabelledSets:
    """Read every set (training sets with `train_policy` for their bad rows, the others keeping theirs: every
    question is scored), report what each reader skipped or kept, and apply the leakage `policy`."""
    if policy not in LEAKAGE_POLICIES:
        raise ConfigError(f"leakage policy {policy!r}: use one of {', '.join(LEAKAGE_POLICIES)}")
    train_files = [read(source, train_policy) for source in train]
    dev_files, eval_files, held_out = ([read(source, "keep") for source in sources]
                                       for sources in (dev, eval, hold_out))
    for f in train_files + dev_files + eval_files:
        if f.misaligned:
            say(f.describe_misaligned())
    report = find_leakage([(f.name, f.examples) for f in train_files],
                          [(f.name, f.examples) for f in dev_files + eval_files + held_out])
    examples, dropped = apply_leakage_policy(report, train_files, policy, say, unit)
    return LabelledSets(train_files, dev_files, eval_files, held_out, report, policy, examples, dropped)


def apply_leakage_policy(report, train_files: list, policy: str, say: Callable[[str], None],
                         unit: str = "questions") -> tuple[list[dict], dict[str, int]]:
    """The training examples to use, and how many were dropped per training set."""
    examples = [e for f in train_files for e in f.examples]
    if report.clean:
        say(report.summary())
        return examples, {}
    if policy == "allow":
        say("WARNING: training despite leakage (--allow-leakage); scores on these evaluation sets are inflated:\n"
            + report.summary())
        return examples, {}
    if policy == "refuse":
        raise ConfigError(
            "training and evaluation data overlap:\n" + report.summary() + "\nPass --drop-leaking-train to remove "
            f"the training {unit} involved, or --allow-leakage to train anyway (scores would be inflated)."
        )
    leaking = report.train_ids()
    kept: list[dict] = []
    dropped: dict[str, int] = {}
    for f in train_files:
        for example in f.examples:
            if (f.name, example["id"]) in leaking:
                dropped[f.name] = dropped.get(f.name, 0) + 1
            else:
                kept.append(example)
    say(report.summary() + f"\ndropped training {unit} involved in a leak: "
        + ", ".join(f"{name} {count}" for name, count in dropped.items()))
    return kept, dropped
