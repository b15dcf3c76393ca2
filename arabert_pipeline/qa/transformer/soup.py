"""A greedy model soup (Wortsman et al. 2022, "Model soups"): QA models fine-tuned from one start, their weights
averaged, each ingredient kept only if the average scores better on dev.

Averaging costs nothing at answering time (one model, unlike an ensemble), which is why it is tried before
ensembles here: the package's speed target is batch-1 latency. Ingredients are added best-first by their own dev
score; the soup is scored with plain decoding (the epoch choice's measure), so the decoder tuned afterwards by
`tune-decoding` is not what picks the ingredients.

    python -m arabert_pipeline.qa.transformer.soup OUT MODEL_DIR... --dev arcd-dev mlqa-ar-dev [--device cuda]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
from pathlib import Path

from ...artifacts import atomic_write, read_metadata, write_metadata
from ...errors import ConfigError
from ..data import read_squad
from .bonuses import SENTENCE_IDF_FILE
from .model import QAModel
from .settings import PLAIN_DECODING
from .tune import dev_score

COPIED = ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", SENTENCE_IDF_FILE)


def average(states: list[dict]) -> dict:
    """The mean of each floating-point tensor; other tensors (position ids) as the first state holds them."""
    first = states[0]
    mismatched = [k for state in states[1:] for k in first.keys() ^ state.keys()]
    if mismatched:
        raise ConfigError(f"models to average differ in their tensors: {sorted(set(mismatched))[:5]}")
    reshaped = sorted({k for state in states[1:] for k in first if state[k].shape != first[k].shape})
    if reshaped:
        raise ConfigError(f"models to average differ in the shapes of {reshaped[:5]}: fine-tuned from other starts?")
    return {k: (sum(state[k].float() for state in states) / len(states)).to(v.dtype) if v.is_floating_point() else v
            for k, v in first.items()}


def greedy_soup(models: list[Path], dev: list[str], *, device: str = "cpu", batch_size: int = 64, say=print):
    """(the chosen models, the averaged weights, a report naming models by their directory's name): ingredients
    best-first, each kept when the soup's dev score does not drop."""
    dev_files = [read_squad(name, misaligned="skip") for name in dev]
    qa = QAModel.load(models[0], device=device)
    qa.settings = dataclasses.replace(qa.settings, **PLAIN_DECODING, leading_words=(), calibration=None)

    def load_state(path: Path) -> dict:
        from safetensors.torch import load_file
        return load_file(Path(path) / "model.safetensors", device="cpu")

    def score(state: dict) -> float:
        qa.model.load_state_dict({k: v.to(qa.model.device) for k, v in state.items()}, strict=False)
        return dev_score(qa, dev_files, batch_size)

    alone = {}
    for path in models:
        alone[str(path)] = score(load_state(path))
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


def write_soup(output: Path, chosen: list[Path], state: dict, report: dict) -> None:
    """The soup as a model dir: the best ingredient's tokenizer, config and metadata, the averaged weights."""
    from safetensors.torch import save_file

    output = Path(output)
    if output.exists():
        raise ConfigError(f"{output} exists: give a new directory")
    partial = output.with_name(output.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    for name in COPIED:
        if (chosen[0] / name).exists():
            shutil.copy(chosen[0] / name, partial / name)
    save_file({k: v.contiguous() for k, v in state.items()}, partial / "model.safetensors", metadata={"format": "pt"})
    write_metadata(partial, **{**read_metadata(chosen[0]), "soup": report})
    partial.rename(output)
    with atomic_write(output / "soup.json") as f:
        json.dump(report, f, ensure_ascii=False, indent=1)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("output", type=Path, help="the soup's model dir (new)")
    parser.add_argument("models", type=Path, nargs="+", help="QA model dirs fine-tuned from one start")
    parser.add_argument("--dev", nargs="+", required=True, help="dev sets (names or SQuAD files)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args(argv)
    chosen, state, report = greedy_soup(args.models, args.dev, device=args.device, batch_size=args.batch_size)
    write_soup(args.output, chosen, state, report)
    print(json.dumps({"soup": str(args.output), "members": report["members"], "dev": report["dev"]}))


if __name__ == "__main__":
    main()
