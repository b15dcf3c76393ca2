"""How much of a difference between systems is fine-tuning noise: per system, the scores of each fine-tuning seed, their
mean and spread (max − min), next to the width of one seed's 95% bootstrap CI.

    python scripts/seed_spread.py REPORT_DIR > REPORT_DIR/seeds.md

Systems are the report's labels with a `-s<seed>` suffix (`arabertv1-style-s0`, `arabertv1-style-s1`): labels sharing
the part before it are seeds of one system; other labels are listed as they are.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np

METRICS = (("soqal_f1", "F1 (SOQAL)"), ("soqal_sm", "SM (SOQAL)"), ("arabic_f1", "F1 (Arabic)"))
SEED = re.compile(r"^(.*)-s(\d+)$")


def main(report: Path) -> None:
    results = json.loads((report / "results.json").read_text(encoding="utf-8"))
    labels = [system["label"] for system in results["systems"] if system["kind"] != "baseline"]
    groups: dict[str, list[tuple[str, str]]] = {}
    for label in labels:
        match = SEED.match(label)
        system, seed = (match.group(1), match.group(2)) if match else (label, "-")
        groups.setdefault(system, []).append((seed, label))
    print("Seed spread: each system's fine-tuning seeds (one pretrained encoder each), ×100. spread = max − min over "
          "seeds; CI width = the mean width of one seed's 95% bootstrap CI (10,000 resamples). A difference between "
          "systems smaller than the spread is within fine-tuning noise.\n")
    for dataset, entry in results["datasets"].items():
        print(f"## {dataset} ({entry['questions']} questions)\n")
        print("| system | seeds | " + " | ".join(f"{name}: per seed → mean (spread; CI width)" for _, name in METRICS)
              + " |")
        print("|---|---|" + "---|" * len(METRICS))
        for system, members in groups.items():
            cells = []
            for key, _ in METRICS:
                scores = [entry["systems"][label]["scores"][key] for _, label in members]
                means = np.array([s["mean"] for s in scores])
                width = float(np.mean([s["high"] - s["low"] for s in scores]))
                per_seed = " / ".join(f"{m:.1f}" for m in means)
                cells.append(f"{per_seed} → {means.mean():.1f} ({means.max() - means.min():.1f}; {width:.1f})")
            print(f"| {system} | {', '.join(seed for seed, _ in members)} | " + " | ".join(cells) + " |")
        print()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(Path(sys.argv[1]))
