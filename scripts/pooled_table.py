"""Pooled comparison over every dataset of one `evaluate` report: each system against a reference and against the
TF-IDF sentence picker, with 95% bootstrap CIs and paired tests, plus F1 inside the right sentence (the mean F1 of the
questions whose answer sentence the system found: where extraction, not sentence choice, loses points).

    python scripts/pooled_table.py REPORT_DIR SYSTEM [SYSTEM ...] > REPORT_DIR/pooled.md

The first SYSTEM is the reference the others are compared with; labels are the report's (`evaluate --label`).
Systems fine-tuned with several seeds (labels `NAME-s0`, `NAME-s1`, ... as scripts/seed_spread.py reads them) get a
second table: each system's per-question scores averaged over its seeds, pooled and per dataset, paired against the
first system's seed mean. Averaging before the bootstrap takes the fine-tuning noise of each question out of the
comparison, which one seed's CI does not cover (seeds.md shows how large it is).
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np

from arabert_pipeline.evaluate.load import load_per_question
from arabert_pipeline.evaluate.metrics import bootstrap_means, paired_bootstrap

COLUMNS = ("soqal_f1", "soqal_sm", "arabic_f1", "soqal_em")
PICKER = "tfidf-sentence"
SEED = re.compile(r"^(.*)-s(\d+)$")  # the label scheme of scripts/seed_spread.py


def scores(report: Path, datasets: list[str], label: str) -> np.ndarray:
    return np.array([[row[c] for c in COLUMNS] for name in datasets for row in load_per_question(report, name, label)])


def cell(paired: dict, i: int) -> str:
    p = paired["p_value"][i]
    return (f"{paired['diff'][i]:+.1f} [{paired['low'][i]:+.1f}, {paired['high'][i]:+.1f}], "
            + (f"p = {p:.3f}" if p >= 0.001 else "p < 0.001"))


def seed_groups(names: list[str]) -> dict[str, list[str]]:
    """System → its seed labels, in the order given; only systems with two or more seeds."""
    groups: dict[str, list[str]] = {}
    for name in names:
        match = SEED.match(name)
        if match:
            groups.setdefault(match.group(1), []).append(name)
    return {system: labels for system, labels in groups.items() if len(labels) > 1}


def seed_mean_table(report: Path, datasets: list[str], groups: dict[str, list[str]]) -> None:
    reference = next(iter(groups))
    print("\n## Seed means\n\nEach system's per-question scores averaged over its fine-tuning seeds, then "
          f"bootstrapped (95% CIs, 10,000 resamples); Δ: the system's seed mean − {reference}'s, paired by question.\n")
    print("| data | system | seeds | F1 (SOQAL) | SM (SOQAL) | EM (SOQAL) | F1 (Arabic) | ΔF1 (SOQAL) | ΔSM (SOQAL) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for scope in (datasets, *([d] for d in datasets)) if len(datasets) > 1 else (datasets,):
        means = {system: np.mean([scores(report, scope, label) for label in labels], axis=0)
                 for system, labels in groups.items()}
        name = " + ".join(scope) if len(scope) > 1 else scope[0]
        for system, a in means.items():
            low, high = np.percentile(bootstrap_means(a, resamples=10_000, seed=0), [2.5, 97.5], axis=0)
            m = 100 * a.mean(axis=0)
            delta = "— | —" if system == reference else " | ".join(
                cell(paired_bootstrap(a, means[reference], resamples=10_000, seed=0), i) for i in (0, 1))
            print(f"| {name} | {system} | {len(groups[system])} | {m[0]:.1f} [{low[0]:.1f}, {high[0]:.1f}] | "
                  f"{m[1]:.1f} [{low[1]:.1f}, {high[1]:.1f}] | {m[3]:.1f} | {m[2]:.1f} | {delta} |")


def main(report: Path, names: list[str]) -> None:
    datasets = list(json.loads((report / "results.json").read_text(encoding="utf-8"))["datasets"])
    table = {name: scores(report, datasets, name) for name in [*names, PICKER]}
    print(f"Pooled over {' + '.join(datasets)} ({len(table[names[0]])} questions); 95% bootstrap CIs (10,000 "
          "resamples), paired tests. F1 in sentence: mean SOQAL F1 of the questions whose answer sentence the system "
          "found (SOQAL Sentence-Match 1).\n")
    print("| system | F1 (SOQAL) | SM (SOQAL) | EM (SOQAL) | F1 in sentence | F1 (Arabic) | vs | ΔF1 (SOQAL) "
          "| ΔSM (SOQAL) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for new in [*names, PICKER]:
        a = table[new]
        low, high = np.percentile(bootstrap_means(a, resamples=10_000, seed=0), [2.5, 97.5], axis=0)
        means = 100 * a.mean(axis=0)
        found = a[:, 1] == 1
        in_sentence = 100 * a[found, 0].mean() if found.any() else float("nan")
        row = (f"| {new} | {means[0]:.1f} [{low[0]:.1f}, {high[0]:.1f}] | {means[1]:.1f} | {means[3]:.1f} | "
               f"{in_sentence:.1f} | {means[2]:.1f} |")
        others = [old for old in (names[0], PICKER) if old != new]
        for i, old in enumerate(others):
            paired = paired_bootstrap(a, table[old], resamples=10_000, seed=0)
            print((row if i == 0 else "| | | | | | |") + f" {old} | {cell(paired, 0)} | {cell(paired, 1)} |")
    groups = seed_groups(names)
    first = SEED.match(names[0])
    if first and first.group(1) in groups:  # the reference must be the first SYSTEM's seeds, as above
        groups = {first.group(1): groups.pop(first.group(1)), **groups}
        seed_mean_table(report, datasets, groups)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(Path(sys.argv[1]), sys.argv[2:])
