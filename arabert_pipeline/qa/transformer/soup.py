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
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ...artifacts.metadata import METADATA_FILE, read_metadata, write_metadata
from ...artifacts.models import check_local_source
from ...artifacts.writes import atomic_directory
from ...errors import ConfigError
from ...outputs import MODEL_DIR_FILES, OutputKind, OutputLock, check_not_input, claim_output_dir
from ..data import read_squad, sets_trained_on
from .bonuses import SENTENCE_IDF_FILE
from .model import QAModel
from .settings import PLAIN_DECODING
from .tune import dev_score

SOUP_FILE = "soup.json"
# What the ingredients and the soup are scored with, and so what the soup is written with: plain decoding, as the
# epoch choice scores; tune-decoding chooses the rest for the soup itself.
SCORED_WITH: dict[str, Any] = {**PLAIN_DECODING, "leading_words": (), "null_score_diff_threshold": 0.0,
                               "calibration": None}
# Settings the models must share: the ingredients are all scored through the first one's windows and tokenizer.
SHARED_SETTINGS = ("preprocessing", "question_overlap", "max_seq_length", "doc_stride", "max_question_tokens",
                   "max_answer_tokens")
# What one model's dev tuning or export decided, which does not carry over to an average.
NOT_INHERITED = ("calibration", "decoding_tuned_by", "decoding_tuning", "int8_decision", "quantize_by_default")
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


def greedy_soup(models: list[Path], dev_files: list, *, device: str = "cpu", batch_size: int = 64, say=print):
    """(the chosen models, the averaged weights, a report naming models by their directory's name): ingredients
    best-first, each kept when the soup's dev score does not drop. `dev_files`: qa.data.SquadFile, read with their
    misaligned answers kept, as finetune scores its dev sets."""
    qa = QAModel.load(models[0], device=device)
    qa.model.float()  # off the CPU a shipped model loads in its fp16 storage; finetune scores dev in fp32
    qa.settings = dataclasses.replace(qa.settings, **SCORED_WITH)

    def load_state(path: Path) -> dict:
        from safetensors.torch import load_file
        return load_file(Path(path) / "model.safetensors", device="cpu")

    def score(state: dict) -> float:
        qa.model.load_state_dict({k: v.to(qa.model.device, qa.model.dtype) if v.is_floating_point() else v
                                  for k, v in state.items()})
        return dev_score(qa, dev_files, batch_size)

    # Each model's weights are read once and kept: the soups tried below reuse them.
    loaded, alone = {}, {}
    for path in models:
        loaded[path] = load_state(path)
        check_compatible(loaded[models[0]], loaded[path], path)
        alone[path] = score(loaded[path])
        say(f"{path}: dev {alone[path]:.2f}")
    order = sorted(models, key=lambda p: -alone[p])
    chosen, states = [order[0]], [loaded[order[0]]]
    best = alone[order[0]]
    tried = []
    for path in order[1:]:
        state = loaded[path]
        candidate = score(average(states + [state]))
        tried.append({"added": path.name, "dev": candidate, "kept": candidate >= best})
        say(f"+ {path}: dev {candidate:.2f} ({'kept' if candidate >= best else 'left out'}; soup was {best:.2f})")
        if candidate >= best:
            chosen.append(path)
            states.append(state)
            best = candidate
    report = {"method": "greedy soup (Wortsman et al. 2022), plain decoding on dev",
              "dev_data": [f.name for f in dev_files], "dev_alone": {path.name: v for path, v in alone.items()},
              "tried": tried, "members": [p.name for p in chosen], "dev": best}
    return chosen, average(states), report


def make_soup(models: Sequence[str | Path], dev: Sequence[str], output: str | Path, *, device: str = "cpu",
              batch_size: int = 64, overwrite: bool = False, say=print) -> dict[str, Any]:
    """The greedy soup of `models` on `dev`, written to `output` as a QA model dir: the best ingredient's tokenizer,
    config, sentence IDF and metadata (soup_metadata), the averaged weights. Returns the report."""
    from safetensors.torch import save_file

    model_dirs, output = [Path(m) for m in models], Path(output)
    if len(model_dirs) < 2:
        raise ConfigError(f"a soup needs at least two models, got {len(model_dirs)}")
    if len({m.name for m in model_dirs}) < len(model_dirs):
        raise ConfigError("the models' directory names must differ: the report names them by it")
    if type(batch_size) is not int or batch_size < 1:
        raise ConfigError(f"--batch-size must be a positive integer, not {batch_size!r}")
    if not dev:
        raise ConfigError("give the dev sets the ingredients are chosen on (--dev)")
    metadata = {}
    for model in model_dirs:
        check_local_source(model)
        for name in ("model.safetensors", "config.json", "tokenizer.json"):
            if not (model / name).is_file():
                raise ConfigError(f"{model}: no {name} (a finished QA model dir from finetune)")
        metadata[model] = read_metadata(model)  # written last by finetune: its absence marks an unfinished run
        if metadata[model].get("task") != "question-answering":
            raise ConfigError(f"{model} is not a QA model dir (its arabert_pipeline.json has no task "
                              "'question-answering')")
    first = model_dirs[0]
    for model in model_dirs[1:]:
        for name in SHARED_SETTINGS:
            if metadata[model].get(name) != metadata[first].get(name):
                raise ConfigError(f"{model}: its {name} is {metadata[model].get(name)!r}, {first}'s "
                                  f"{metadata[first].get(name)!r}: a soup needs runs of one recipe")
        if tokenizer_of(model) != tokenizer_of(first):
            raise ConfigError(f"{model}: its tokenizer.json differs from {first}'s")
    check_not_input(output, model_dirs, within=True)
    with OutputLock(output, "soup"):
        dev_files = [read_squad(source, misaligned="keep") for source in dev]
        for model in model_dirs:
            overlap = sets_trained_on(metadata[model].get("training_data"), dev_files)
            if overlap:
                raise ConfigError(f"{model} was trained on {', '.join(overlap)}: choose on sets it has not seen")
        claim_output_dir(output, SOUP_OUTPUT, inputs=[*model_dirs, *[d for d in dev if Path(d).exists()]],
                         overwrite=overwrite)
        chosen, state, report = greedy_soup(model_dirs, dev_files, device=device, batch_size=batch_size, say=say)
        with atomic_directory(output) as staging:
            for path in sorted(chosen[0].iterdir()):
                if (path.is_file() and SOUP_OUTPUT.owns(path.name)
                        and path.name not in ("model.safetensors", METADATA_FILE, SOUP_FILE, "model.onnx")):
                    (staging / path.name).write_bytes(path.read_bytes())
            save_file({k: v.contiguous() for k, v in state.items()}, str(staging / "model.safetensors"),
                      metadata={"format": "pt"})
            write_metadata(staging, **soup_metadata(metadata[chosen[0]], list(metadata.values()), report))
            (staging / SOUP_FILE).write_text(json.dumps(report, ensure_ascii=False, indent=1) + "\n",
                                             encoding="utf-8")
    return report


def soup_metadata(best: dict[str, Any], models: list[dict[str, Any]], report: dict[str, Any]) -> dict[str, Any]:
    """The soup's metadata: the best ingredient's, with the settings the soup was scored with (SCORED_WITH; its
    reader/ is not copied), without what was tuned for one model alone (NOT_INHERITED), and with every
    ingredient's training data, so that a later tune-decoding refuses dev sets any of them trained on."""
    metadata = {k: v for k, v in best.items() if k not in NOT_INHERITED}
    metadata.update({k: list(v) if isinstance(v, tuple) else v for k, v in SCORED_WITH.items() if k != "calibration"})
    training, seen = [], set()
    for entry in (e for m in models for e in m.get("training_data", [])):
        key = json.dumps(entry, sort_keys=True)
        if key not in seen:
            seen.add(key)
            training.append(entry)
    return {**metadata, "training_data": training, "soup": report}


def tokenizer_of(model: Path) -> Any:
    """A model's tokenizer.json as parsed: two saves of one tokenizer may order its keys differently."""
    try:
        return json.loads((model / "tokenizer.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ConfigError(f"{model / 'tokenizer.json'}: not readable as JSON ({error})") from None


def describe(report: dict[str, Any]) -> str:
    alone = ", ".join(f"{name} {score:.2f}" for name, score in report["dev_alone"].items())
    return (f"dev alone: {alone}; soup of {' + '.join(report['members'])}: dev {report['dev']:.2f} "
            f"({len(report['tried'])} tried); choose its decoding with tune-decoding")
