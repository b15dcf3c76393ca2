"""How well static and contextual vectors tell the senses of a homograph apart.

A static vector (word2vec, fastText, an encoder's input token embeddings) gives a word one point whatever the
sentence: عين is the same vector as an eye and as a spring. An encoder's hidden states depend on the sentence. For
each homograph of a hand-written set (`data/polysemy/ar_homographs.jsonl`: word, sense, sentence), this module takes
the word's vector in every sentence, once static and once per encoder layer (the mean of the hidden states of the
word's subword tokens), and measures:

- leave-one-out nearest-centroid sense accuracy: each sentence's vector is given the sense whose centroid (of the
  word's other sentences) is nearest by cosine. A tie counts 1/(senses tied), the expected score of a coin toss, so
  a static vector, one point for every sentence, scores exactly chance (1 / number of senses) by construction;
- the mean cosine between two sentences of the same sense and between two of different senses (1.0 and 1.0 for a
  static vector).

    occurrences = read_homographs("data/polysemy/ar_homographs.jsonl")
    # {"static (input embeddings)": ..., "layer 0": ...}
    vectors = encoder_vectors(model, tokenizer, "arabertv02", occurrences)
    results = measure(occurrences, vectors)

`scripts/polysemy.py` runs it on the shipped model and writes the table and a PCA plot.
"""
from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..artifacts.reads import parse_json
from ..errors import ConfigError, InputError

if TYPE_CHECKING:
    import numpy as np

STATIC_INPUT = "static (input embeddings)"
# Cosines this close count as a tie: the centroid of n copies of one vector is that vector up to rounding.
TIE_TOLERANCE = 1e-9


@dataclasses.dataclass(frozen=True)
class Occurrence:
    word: str
    sense: str
    text: str
    translit: str = ""
    line: int = 0


def read_homographs(path: str | os.PathLike) -> list[Occurrence]:
    """The JSON lines of `path` ({"word", "sense", "text"[, "translit"]}); every word needs two or more senses and
    every sense two or more sentences (a held-out sentence's own sense still needs a centroid)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read ({exc})", path=path) from None
    occurrences = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        item = parse_json(line, path=path, line=number)
        if not isinstance(item, dict):
            raise InputError("expected a JSON object", path=path, line=number)
        for field in ("word", "sense", "text"):
            if not isinstance(item.get(field), str) or not item[field].strip():
                raise InputError(f"{field} must be a non-empty string", path=path, line=number)
        occurrences.append(Occurrence(item["word"], item["sense"], item["text"], str(item.get("translit", "")),
                                      number))
    if not occurrences:
        raise InputError("no sentences", path=path)
    for word, indices in _by_word(occurrences).items():
        counts = _sense_counts([occurrences[i] for i in indices])
        if len(counts) < 2 or min(counts.values()) < 2:
            raise InputError(f"{word}: needs two or more senses with two or more sentences each, has "
                             f"{dict(counts)}", path=path)
    return occurrences


def _by_word(occurrences: Sequence[Occurrence]) -> dict[str, list[int]]:
    groups: dict[str, list[int]] = {}
    for i, item in enumerate(occurrences):
        groups.setdefault(item.word, []).append(i)
    return groups


def _sense_counts(items: Sequence[Occurrence]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for item in items:
        counts[item.sense] = counts.get(item.sense, 0) + 1
    return counts


def word_span(preprocessed_text: str, preprocessed_word: str, *, where: str = "") -> tuple[int, int]:
    """(start, end) of the one whole-word occurrence of `preprocessed_word` in `preprocessed_text`."""
    pattern = re.compile(r"(?<!\S)" + re.escape(preprocessed_word) + r"(?!\S)")
    found = [m.span() for m in pattern.finditer(preprocessed_text)]
    if len(found) != 1:
        raise InputError(f"{preprocessed_word!r} occurs {len(found)} times as a whole word in {preprocessed_text!r}; "
                         "a sentence must hold the homograph exactly once" + (f" ({where})" if where else ""))
    return found[0]


def encoder_vectors(model, tokenizer, preprocessing: str, occurrences: Sequence[Occurrence], *,
                    batch_size: int = 16) -> dict[str, np.ndarray]:
    """{representation: array (sentences, hidden)}: the static input-embedding vector and every hidden-state layer
    (layer 0 is the embedding layer's output: token + position embeddings, so already not quite static) of the
    word's subword tokens, averaged. The word's characters are found in the preprocessed sentence and mapped to
    tokens through the fast tokenizer's offsets."""
    import numpy as np
    import torch

    from ..preprocess import Preprocessor

    preprocessor = Preprocessor(preprocessing)
    texts = preprocessor.preprocess_batch([o.text for o in occurrences])
    words = {w: preprocessor.preprocess(w).strip() for w in {o.word for o in occurrences}}
    spans = [word_span(text, words[o.word], where=f"line {o.line}" if o.line else o.text)
             for text, o in zip(texts, occurrences, strict=True)]
    embedding = model.get_input_embeddings().weight.detach()
    static, layers = [], []
    model.eval()
    for start in range(0, len(texts), batch_size):
        batch = texts[start:start + batch_size]
        encoded = tokenizer(batch, return_offsets_mapping=True, padding=True, truncation=True, return_tensors="pt")
        offsets = encoded.pop("offset_mapping")
        with torch.no_grad():
            hidden = model(**encoded, output_hidden_states=True).hidden_states  # (layers + 1) × (batch, seq, dim)
        stacked = torch.stack(hidden, dim=1)  # (batch, layers + 1, seq, dim)
        for row, (begin, end) in enumerate(spans[start:start + batch_size]):
            picked = [t for t, (a, b) in enumerate(offsets[row].tolist())
                      if b > a and a < end and b > begin and encoded["attention_mask"][row, t]]
            if not picked:
                raise InputError(f"the tokenizer kept no token of {batch[row][begin:end]!r} in {batch[row]!r} "
                                 "(cut by truncation?)")
            layers.append(stacked[row, :, picked].mean(dim=1).double().numpy())
            static.append(embedding[encoded["input_ids"][row, picked]].mean(dim=0).double().numpy())
    by_layer = np.stack(layers)  # (sentences, layers + 1, dim)
    vectors = {STATIC_INPUT: np.stack(static)}
    for layer in range(by_layer.shape[1]):
        vectors[f"layer {layer}"] = by_layer[:, layer]
    return vectors


def static_vectors(embeddings, occurrences: Sequence[Occurrence]):
    """The vectors of an `Embeddings` (train-embeddings output) for each sentence: the word's one vector, repeated."""
    import numpy as np

    cache = {word: np.asarray(embeddings.vector(word), dtype=np.float64) for word in {o.word for o in occurrences}}
    return np.stack([cache[o.word] for o in occurrences])


def _cosines(matrix):
    import numpy as np

    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    unit = matrix / np.maximum(norms, 1e-300)
    return unit @ unit.T


def sense_separation(vectors, senses: Sequence[str]) -> dict[str, float]:
    """Leave-one-out nearest-centroid accuracy (cosine; ties split), mean same-sense and cross-sense cosine of the
    vectors (one row per sentence) of one word."""
    import numpy as np

    vectors = np.asarray(vectors, dtype=np.float64)
    senses = list(senses)
    labels = sorted(set(senses))
    if len(labels) < 2:
        raise ConfigError("sense separation needs two or more senses")
    members = {label: [i for i, s in enumerate(senses) if s == label] for label in labels}
    if min(len(m) for m in members.values()) < 2:
        raise ConfigError("every sense needs two or more sentences for leave-one-out")
    sums = {label: vectors[idx].sum(axis=0) for label, idx in members.items()}
    correct = 0.0
    for i, sense in enumerate(senses):
        scores = []
        for label in labels:
            n = len(members[label]) - (label == sense)
            centroid = (sums[label] - (vectors[i] if label == sense else 0.0)) / n
            denominator = np.linalg.norm(centroid) * np.linalg.norm(vectors[i])
            scores.append(float(centroid @ vectors[i] / denominator) if denominator > 0 else 0.0)
        best = max(scores)
        tied = [label for label, score in zip(labels, scores, strict=True) if best - score <= TIE_TOLERANCE]
        correct += (sense in tied) / len(tied)
    cos = _cosines(vectors)
    same = [cos[i, j] for i in range(len(senses)) for j in range(i + 1, len(senses)) if senses[i] == senses[j]]
    cross = [cos[i, j] for i in range(len(senses)) for j in range(i + 1, len(senses)) if senses[i] != senses[j]]
    return {"accuracy": correct / len(senses), "chance": 1 / len(labels),
            "same_sense_cosine": float(np.mean(same)), "cross_sense_cosine": float(np.mean(cross)),
            "sentences": len(senses), "senses": len(labels)}


def measure(occurrences: Sequence[Occurrence], representations: dict[str, object]) -> dict:
    """{representation: {"per_word": {word: sense_separation}, and their means over words}}."""
    import numpy as np

    groups = _by_word(occurrences)
    results = {}
    for name, matrix in representations.items():
        matrix = np.asarray(matrix)
        per_word = {word: sense_separation(matrix[idx], [occurrences[i].sense for i in idx])
                    for word, idx in groups.items()}
        summary = {key: float(np.mean([r[key] for r in per_word.values()]))
                   for key in ("accuracy", "chance", "same_sense_cosine", "cross_sense_cosine")}
        summary["gap"] = summary["same_sense_cosine"] - summary["cross_sense_cosine"]
        results[name] = {**summary, "per_word": per_word}
    return results


def format_markdown(results: dict, occurrences: Sequence[Occurrence], *, title: str = "") -> str:
    groups = _by_word(occurrences)
    lines = [f"# {title}", ""] if title else []
    lines += ["| representation | sense accuracy (LOO nearest centroid) | chance | same-sense cosine | "
              "cross-sense cosine | gap |", "|---|---:|---:|---:|---:|---:|"]
    for name, r in results.items():
        lines.append(f"| {name} | {r['accuracy']:.3f} | {r['chance']:.3f} | {r['same_sense_cosine']:.3f} | "
                     f"{r['cross_sense_cosine']:.3f} | {r['gap']:+.3f} |")
    lines += ["", "Sense accuracy per word:", "",
              "| word | senses | " + " | ".join(results) + " |",
              "|---|---|" + "---:|" * len(results)]
    for word, idx in groups.items():
        senses = " / ".join(_sense_counts([occurrences[i] for i in idx]))
        translit = occurrences[idx[0]].translit
        lines.append(f"| {word}{f' ({translit})' if translit else ''} | {senses} | "
                     + " | ".join(f"{r['per_word'][word]['accuracy']:.2f}" for r in results.values()) + " |")
    return "\n".join(lines) + "\n"


def plot_projection(matrix, occurrences: Sequence[Occurrence], path: str | os.PathLike, *, title: str) -> None:
    """One panel per word: its sentences' vectors projected on their first two principal components, coloured by
    sense. Panels are titled in transliteration: matplotlib does not shape Arabic script."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    groups = _by_word(occurrences)
    columns = min(5, len(groups))
    rows = -(-len(groups) // columns)
    figure, axes = plt.subplots(rows, columns, figsize=(3.2 * columns, 3.0 * rows), squeeze=False)
    markers = ["o", "s", "^", "D", "v"]
    # Not strict: the grid's last row may have more axes than words (they are turned off below).
    for ax, (word, idx) in zip(axes.flat, groups.items(), strict=False):
        points = np.asarray(matrix)[idx]
        centred = points - points.mean(axis=0)
        _, _, components = np.linalg.svd(centred, full_matrices=False)
        projected = centred @ components[:2].T
        if projected.shape[1] < 2:
            projected = np.pad(projected, ((0, 0), (0, 2 - projected.shape[1])))
        for k, sense in enumerate(_sense_counts([occurrences[i] for i in idx])):
            chosen = [j for j, i in enumerate(idx) if occurrences[i].sense == sense]
            ax.scatter(projected[chosen, 0], projected[chosen, 1], label=sense, marker=markers[k % len(markers)],
                       s=28, alpha=0.8)
        ax.set_title(occurrences[idx[0]].translit or f"word {list(groups).index(word) + 1}", fontsize=10)
        ax.legend(fontsize=7, loc="best")
        ax.set_xticks([])
        ax.set_yticks([])
    for ax in list(axes.flat)[len(groups):]:
        ax.axis("off")
    figure.suptitle(title, fontsize=11)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def run_polysemy(model_dir: str | os.PathLike, data: str | os.PathLike, output_dir: str | os.PathLike, *,
                 static_embeddings: str | os.PathLike | None = None, overwrite: bool = False) -> dict:
    """Measure `model_dir`'s encoder (any HF model dir of ours: its base encoder's hidden states) on `data`, and
    write polysemy.md, polysemy.json and pca.png (the last layer) into `output_dir`."""
    import json

    from transformers import AutoModel

    from ..artifacts.metadata import read_metadata
    from ..artifacts.models import check_local_source, load_pretrained_model
    from ..artifacts.paths import portable_path
    from ..artifacts.writes import atomic_write
    from ..outputs import claim_output_file
    from ..tokenizer.load import load_pretrained_tokenizer

    output_dir = Path(output_dir)
    files = {name: output_dir / name for name in ("polysemy.md", "polysemy.json", "pca.png")}
    for path in files.values():
        claim_output_file(path, verb="polysemy", inputs=[data, model_dir], overwrite=overwrite)
    occurrences = read_homographs(data)
    check_local_source(model_dir)
    preprocessing = read_metadata(model_dir).get("preprocessing")
    if not isinstance(preprocessing, str):
        raise ConfigError(f"{model_dir}/arabert_pipeline.json names no preprocessing")
    tokenizer = load_pretrained_tokenizer(model_dir)
    # A QA or MLM checkpoint loads as its bare encoder; the task head is not needed. (No add_pooling_layer=False:
    # only BERT-likes take it, and an unused pooler costs nothing here.)
    model, _ = load_pretrained_model(AutoModel, model_dir)
    representations = {}
    if static_embeddings is not None:
        from .vectors import Embeddings

        embeddings = Embeddings.load(static_embeddings)
        representations[f"static ({Path(static_embeddings).name})"] = static_vectors(embeddings, occurrences)
    representations.update(encoder_vectors(model, tokenizer, preprocessing, occurrences))
    results = measure(occurrences, representations)
    last = [name for name in representations if name.startswith("layer ")][-1]
    title = f"Homograph senses: {Path(model_dir).name} ({preprocessing}), {len(occurrences)} sentences"
    report = {"model": portable_path(model_dir), "data": portable_path(data), "preprocessing": preprocessing,
              "words": len(_by_word(occurrences)), "sentences": len(occurrences), "results": results}
    with atomic_write(files["polysemy.md"]) as f:
        f.write(format_markdown(results, occurrences, title=title))
    with atomic_write(files["polysemy.json"]) as f:
        json.dump(report, f, ensure_ascii=False, indent=1)
        f.write("\n")
    with atomic_write(files["pca.png"], "wb") as f:
        plot_projection(representations[last], occurrences, f, title=f"{Path(model_dir).name}, {last}: PCA per word")
    return report
