"""The report's plots (matplotlib, written as PNG under plots/): metrics with CIs, F1 by answer length and question
word, pretraining curves."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from . import metrics
from .buckets import ANSWER_LENGTH_BUCKETS, OTHER, QUESTION_WORDS
from .load import safe_name
from .tables import METRIC_LABELS, VARIANT_LABELS


def plot_dataset(results: dict, dataset: str, directory: Path) -> list[Path]:
    """The three plots of one dataset, as PNG files in `directory`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    entry = results["datasets"][dataset]
    labels = list(entry["systems"])
    width = 0.8 / len(labels)
    paths = []

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for ax, variant in zip(axes, metrics.VARIANTS, strict=True):
        for i, label in enumerate(labels):
            scores = [entry["systems"][label]["scores"][f"{variant}_{m}"] for m in metrics.METRICS]
            means = np.array([s["mean"] for s in scores])
            errors = np.array([[s["mean"] - s["low"] for s in scores], [s["high"] - s["mean"] for s in scores]])
            x = np.arange(len(metrics.METRICS)) + (i - (len(labels) - 1) / 2) * width
            ax.bar(x, means, width, yerr=errors, capsize=3, label=label)
        ax.set_xticks(np.arange(len(metrics.METRICS)), [METRIC_LABELS[m] for m in metrics.METRICS])
        ax.set_title(f"{VARIANT_LABELS[variant]} metric variant")
        ax.set_ylim(0, 100)
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_ylabel("score (×100), 95% bootstrap CI")
    axes[1].legend(fontsize=8)
    fig.suptitle(f"{dataset}: {entry['questions']} questions")
    fig.tight_layout()
    paths.append(directory / f"{safe_name(dataset)}_metrics.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    for field, title, names in (
        ("by_answer_length", "gold answer length (words)", {name: name for name, _, _ in ANSWER_LENGTH_BUCKETS}),
        ("by_question_word", "question word", {**{w: latin for w, (latin, _) in QUESTION_WORDS.items()}, OTHER: OTHER}),
    ):
        buckets = list(dict.fromkeys(b for s in entry["systems"].values() for b in s[field]))
        fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(buckets) + 2), 4.2))
        for i, label in enumerate(labels):
            groups = entry["systems"][label][field]
            x = np.arange(len(buckets)) + (i - (len(labels) - 1) / 2) * width
            ax.bar(x, [groups[b]["arabic_f1"] for b in buckets], width, label=label)
        counts = entry["systems"][labels[0]][field]
        # Latin names: matplotlib does not shape Arabic script.
        ax.set_xticks(np.arange(len(buckets)), [f"{names[b]}\nn={counts[b]['n']}" for b in buckets], fontsize=8)
        ax.set_ylabel("F1 (Arabic variant, ×100)")
        ax.set_ylim(0, 100)
        ax.set_xlabel(title)
        ax.set_title(f"{dataset}: F1 by {title}")
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        paths.append(directory / f"{safe_name(dataset)}_f1_{field}.png")
        fig.savefig(paths[-1], dpi=110)
        plt.close(fig)
    return paths


# Curves worth plotting, in panel order: (title, keys that measure it in the objectives' logs).
PRETRAINING_PANELS = (
    ("masked-token loss (MLM; ELECTRA generator)", ("mlm_loss", "generator_loss")),
    ("replaced-token detection loss (ELECTRA)", ("rtd_loss",)),
    ("span-selection loss", ("span_loss",)),
)


def plot_pretraining(logs: dict[str, list[dict]], directory: Path) -> Path:
    """Training curves (lines) and held-out evaluations (markers) against tokens read, one panel per loss."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(title, keys) for title, keys in PRETRAINING_PANELS
              if any(k in r for rows in logs.values() for r in rows for k in keys)]
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4.2), squeeze=False)
    for ax, (title, keys) in zip(axes[0], panels, strict=True):
        for index, (label, rows) in enumerate(logs.items()):
            color = f"C{index}"
            for key in keys:
                train = [(r["tokens"] / 1e6, r[key]) for r in rows if key in r and "tokens" in r]
                if train:
                    ax.plot(*zip(*train, strict=True), color=color, lw=1, alpha=0.8, label=f"{label} ({key})")
                held_out = [(r["tokens"] / 1e6, r[f"eval_{key}"]) for r in rows
                            if f"eval_{key}" in r and "tokens" in r]
                if held_out:
                    ax.plot(*zip(*held_out, strict=True), "o", color=color, ms=4, label=f"{label} (held-out)")
        ax.set_xlabel("tokens read (millions)")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    path = directory / "pretraining.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_open(results: dict, directory: Path) -> Path:
    """Documents and collections (results["open"], pooled): F1 with its CI and the time a question relative to the
    paragraph's for every row, and recall at 1, 5 and 20 passages for the rows that retrieve."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pooled = results["open"]["pooled"]
    labels = list(pooled)
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.4))
    f1 = [pooled[label]["scores"]["soqal_f1"] for label in labels]
    y = np.arange(len(labels))
    axes[0].barh(y, [s["mean"] for s in f1], xerr=[[s["mean"] - s["low"] for s in f1],
                                                    [s["high"] - s["mean"] for s in f1]], capsize=3)
    axes[0].set_yticks(y, labels, fontsize=8)
    axes[0].invert_yaxis()
    axes[0].set_xlabel("F1 (SOQAL, ×100), 95% bootstrap CI")
    ratios = [pooled[label]["ms"].get("ratio") or 1.0 for label in labels]
    axes[1].barh(y, ratios, color="C1")
    axes[1].set_yticks(y, [""] * len(labels))
    axes[1].invert_yaxis()
    axes[1].set_xlabel("ms a question ÷ the paragraph's (one thread)")
    ks = results["open"]["recall_at"]
    for label in labels:
        recall = pooled[label].get("recall")
        if recall:
            axes[2].plot(ks, [recall[f"@{k}"]["mean"] for k in ks], "o-", label=label)
    axes[2].set_xscale("log")
    axes[2].set_xticks(ks, [str(k) for k in ks])
    axes[2].set_ylim(0, 100)
    axes[2].set_xlabel("passages retrieved")
    axes[2].set_ylabel("recall of the gold passage / paragraph (×100)")
    axes[2].legend(fontsize=7)
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.suptitle(f"Documents and collections, pooled over {' + '.join(results['datasets'])}")
    fig.tight_layout()
    path = directory / "open.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
