"""`arabert-pipeline soup`: a greedy model soup (Wortsman et al. 2022, "Model soups"): QA models fine-tuned from one
start, their weights averaged, each ingredient kept only if the average scores better on dev.

Averaging costs nothing at answering time (one model, unlike an ensemble), which is why it is tried before
ensembles here: the package's speed target is batch-1 latency. Ingredients are added best-first by their own dev
score; the soup is scored with plain decoding (the epoch choice's measure), so the decoder tuned afterwards by
`tune-decoding` is not what picks the ingredients.

    make_soup(["runs/seed-1", "runs/seed-2", "runs/seed-3"], ["arcd-dev", "mlqa-ar-dev"], "runs/soup")
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Sequence

from ...artifacts import atomic_directory, check_local_source, read_metadata, write_metadata
from ...errors import ConfigError
from ...outputs import MODEL_DIR_FILES, OutputKind, OutputLock, claim_output_dir
from ..data import read_squad
from .bonuses import SENTENCE_IDF_FILE
from .model import QAModel
from .settings import PLAIN_DECODING
from .tune import dev_score

SOUP_FILE = "soup.json"
SOUP_OUTPUT = OutputKind("soup", names=(*MODEL_DIR_FILES, SENTENCE_IDF_FILE, SOUP_FILE), markers=(SOUP_FILE,))


def check_compatible(first: dict, state: dict, name: object) -> None:
    """`state` has `first`'s tensors at their shapes, or a ConfigError naming `name` says what differs."""
    mismatched = sorted(first.keys() ^ state.keys())
    if mismatched:
        raise ConfigError(f"{name}: its tensors differ from the first model's: {mismatched[:5]}")
    reshaped = sorted(k for k in first if state[k].shape != first[k].shape)
    if reshaped:
        raise ConfigError(f"{name}: the shapes of {reshaped[:5]} differ from the first model's (fine-tuned from "
                          "another start?)")


def average(states: list[dict]) -> dict:
    """The mean of each floating-point tensor; other tensors (position ids) as the first state holds them."""
    first = states[0]
    for i, state in enumerate(states[1:], 2):
        check_compatible(first, state, f"model {i}")
    return {k: (sum(state[k].float() for state in states) / len(states)).to(v.dtype) if v.is_floating_point() else v
            for k, v in first.items()}


def greedy_soup(models: list[Path], dev: list[str], *, device: str = "cpu", batch_size: int = 64, say=print):
    """(the chosen models, the averaged weights, a report naming models by their directory's name): ingredients
    best-first, each kept when the soup's dev score does not drop."""
    dev_files = [read_squad(name, misaligned="keep") for name in dev]  # as finetune scores its dev sets
    qa = QAModel.load(models[0], device=device)
    qa.settings = dataclasses.replace(qa.settings, **PLAIN_DECODING, leading_words=(), calibration=None)

    def load_state(path: Path) -> dict:
        from safetensors.torch import load_file
        return load_file(Path(path) / "model.safetensors", device="cpu")

    def score(state: dict) -> float:
        # not strict: save_pretrained leaves out tied weights, which the model still holds
        qa.model.load_state_dict({k: v.to(qa.model.device) for k, v in state.items()}, strict=False)
        return dev_score(qa, dev_files, batch_size)

    reference = load_state(models[0])
    alone = {}
    for path in models:
        state = load_state(path)
        check_compatible(reference, state, path)
        alone[str(path)] = score(state)
        say(f"{path}: dev {alone[str(path)]:.2f}")
    order = sorted(models, key=lambda p: -alone[str(p)])
    chosen, states = [order[0]], [load_state(order[0])]
    best = alone[str(order[0])]
    tried = []
    for path in order[1:]:
        state = load_state(path)
        candidate = score(average(states + [state]))
        tried.append({"added": path.name, "dev": candidate, "kept": candidate >= best})
        say(f"+ {path}: dev {candidate:.2f} ({'kept' if candidate >= best else 'left out'}; soup was {best:.2f})")
        if candidate >= best:
            chosen.append(path)
            states.append(state)
            best = candidate
    report = {"method": "greedy soup (Wortsman et al. 2022), plain decoding on dev",
              "dev_data": dev, "dev_alone": {Path(k).name: v for k, v in alone.items()},
              "tried": tried, "members": [p.name for p in chosen], "dev": best}
    return chosen, average(states), report


def make_soup(models: Sequence[str | Path], dev: Sequence[str], output: str | Path, *, device: str = "cpu",
              batch_size: int = 64, overwrite: bool = False, say=print) -> dict[str, Any]:
    """The greedy soup of `models` on `dev`, written to `output` as a QA model dir: the best ingredient's tokenizer,
    config, sentence IDF and metadata (soup_metadata), the averaged weights. Returns the report."""
    from safetensors.torch import save_file

    models, output = [Path(m) for m in models], Path(output)
    if len(models) < 2:
        raise ConfigError(f"a soup needs at least two models, got {len(models)}")
    if len({m.name for m in models}) < len(models):
        raise ConfigError("the models' directory names must differ: the report names them by it")
    for model in models:
        check_local_source(model)
        if not (model / "model.safetensors").is_file():
            raise ConfigError(f"{model}: no model.safetensors (a QA model dir from finetune)")
    if not dev:
        raise ConfigError("give the dev sets the ingredients are chosen on (--dev)")
    with OutputLock(output, "soup"):
        claim_output_dir(output, SOUP_OUTPUT, inputs=models, overwrite=overwrite)
        chosen, state, report = greedy_soup(models, list(dev), device=device, batch_size=batch_size, say=say)
        with atomic_directory(output) as staging:
            for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                         SENTENCE_IDF_FILE):
                if (chosen[0] / name).exists():
                    (staging / name).write_bytes((chosen[0] / name).read_bytes())
            save_file({k: v.contiguous() for k, v in state.items()}, str(staging / "model.safetensors"),
                      metadata={"format": "pt"})
            write_metadata(staging, **soup_metadata(read_metadata(chosen[0]), report))
            (staging / SOUP_FILE).write_text(json.dumps(report, ensure_ascii=False, indent=1) + "\n",
                                             encoding="utf-8")
    return report


def soup_metadata(best: dict[str, Any], report: dict[str, Any]) -> dict[str, Any]:
    """The best ingredient's metadata for the soup: its decoding settings stand until tune-decoding re-chooses them,
    but a score calibration fitted to another model's scores would mislead, so a soup of several drops it; the reader
    (reader/) is not copied, so its weight goes to 0."""
    metadata = {**best, "soup": report}
    if len(report["members"]) > 1:
        metadata.pop("calibration", None)
    if metadata.get("reader_weight"):
        metadata["reader_weight"] = 0.0
    return metadata


def describe(report: dict[str, Any]) -> str:
    alone = ", ".join(f"{name} {score:.2f}" for name, score in report["dev_alone"].items())
    return (f"dev alone: {alone}; soup of {' + '.join(report['members'])}: dev {report['dev']:.2f} "
            f"({len(report['tried'])} tried); choose its decoding with tune-decoding")
