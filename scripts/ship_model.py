"""Copy a fine-tuned QA model dir into the package as the shipped default: the Hugging Face files, the sentence
prior's IDF table and the reader/ that `tune-decoding --reader` attached (no checkpoints, no eval/), weights in fp16,
metadata with portable paths. Run `arabert-pipeline export-onnx TARGET` afterwards, then store it compactly as the
shipped models are (issue 53: `compact_companion` for the reader, scripts/compact_models.py's steps) and commit it
only once scripts/compact_gate.py passes against the uncompacted copy; tests/test_package_size.py holds the budgets.

    python scripts/ship_model.py runs/qa/arabert-mini arabert_pipeline/models/arabert-mini
"""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from safetensors.torch import load_file, save_file

from arabert_pipeline.artifacts.paths import portable_path
from arabert_pipeline.artifacts.writes import follow_umask
from arabert_pipeline.qa.transformer.companion import COMPANION_DIR, copy_companion

WEIGHTS, METADATA = "model.safetensors", "arabert_pipeline.json"
# What a model dir may hold that is rebuilt for the target (export-onnx writes model.onnx again).
NOT_COPIED = {WEIGHTS, METADATA, "model.onnx", "log.jsonl"}  # the training log stays with the run


def portable(value):
    """finetune records its own paths portably; the pretraining run's settings, nested inside, name its machine's."""
    if isinstance(value, dict):
        return {key: portable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [portable(item) for item in value]
    return portable_path(value) if isinstance(value, str) else value


def ship(source: Path, target: Path) -> None:
    if not (source / WEIGHTS).is_file() or not (source / METADATA).is_file():
        sys.exit(f"{source}: not a model dir ({WEIGHTS} and {METADATA} expected)")
    target.mkdir(parents=True, exist_ok=True)
    for path in sorted(source.iterdir()):
        if path.is_file() and path.name not in NOT_COPIED and not path.name.startswith("."):
            shutil.copy2(path, target / path.name)
    if (source / COMPANION_DIR).is_dir():  # the DrQA reader `tune-decoding --reader` attached
        shutil.rmtree(target / COMPANION_DIR, ignore_errors=True)
        copy_companion(source, target)
    metadata = json.loads((source / METADATA).read_text(encoding="utf-8"))
    (target / METADATA).write_text(json.dumps(portable(metadata), ensure_ascii=False, indent=2, sort_keys=True) + "\n",
                                   encoding="utf-8")
    weights = load_file(source / WEIGHTS)
    save_file({k: v.half().contiguous() for k, v in weights.items()}, target / WEIGHTS, metadata={"format": "pt"})
    follow_umask(target)  # a run's private (0600) weights would stay private in the package


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    ship(Path(sys.argv[1]), Path(sys.argv[2]))
