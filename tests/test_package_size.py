"""The shipped models stay within the wheel's budget (issue 53). PyPI refuses files over 100 MB; the issue's target is
a wheel of ≤ 60 MB, which the models meet since its third session (docs/experiments/compact-storage.md). So:

- each model folder and each file may not grow past what it takes on disk now, plus a small margin: a model that must
  grow raises its number here in the same commit, with the reason;
- the models together stay ≤ MODELS_CEILING_MB on disk, which keeps the wheel under PyPI's limit with room to spare;
- deflated as a wheel stores them (int8 and 4-bit weights barely compress; words.txt and the tokenizer do), they
  leave the wheel ≤ 60 MB (a slow test: it compresses every file);
- no file is stored twice (a task model that shares arabert-mini's tokenizer names it in tokenizer.shared.json).

.ci/install_check builds the wheel and checks its real size against the same 60 MB.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

MODELS = Path(__file__).resolve().parents[1] / "arabert_pipeline" / "models"
WHEEL_TARGET_MB = 60
# The rest of the wheel (code, data files, the web page) takes ~0.5 MB deflated; 1 MB of room for it.
OTHER_MB = 1
MODELS_CEILING_MB = 100 - OTHER_MB  # PyPI's limit per file, less the rest of the wheel
# MB on disk per model folder: what each took when issue 53 stored it compactly (42.4, 10.9, 15.1), plus ~3%.
MODEL_BUDGETS_MB = {"arabert-mini": 43.7, "arabert-sentiment": 11.2, "arabert-ner": 15.5}
FILE_BUDGET_MB = 26.0  # the largest file: arabert-mini's int8-row weights, 25.1 MB
DUPLICATE_MIN_BYTES = 1 << 16


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts)


def size_mb(path: Path) -> float:
    return path.stat().st_size / 1e6


def oversized(folder: Path, file_budget_mb: float) -> dict[str, float]:
    return {str(p.relative_to(folder)): round(size_mb(p), 2) for p in _files(folder)
            if size_mb(p) > file_budget_mb}


def copies(folder: Path) -> list[tuple[str, str]]:
    seen: dict[str, Path] = {}
    found = []
    files = [p for p in _files(folder) if p.stat().st_size >= DUPLICATE_MIN_BYTES]
    sizes = [p.stat().st_size for p in files]
    for path in files:
        if sizes.count(path.stat().st_size) < 2:  # only files of one size can be copies: hash those alone
            continue
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if digest in seen:
            found.append((str(path.relative_to(folder)), str(seen[digest].relative_to(folder))))
        seen.setdefault(digest, path)
    return found


def _models_mb() -> float:
    return sum(size_mb(p) for p in _files(MODELS))


def test_each_model_folder_stays_within_its_budget():
    folders = sorted(p.name for p in MODELS.iterdir() if p.is_dir() and p.name != "__pycache__")
    assert set(folders) <= set(MODEL_BUDGETS_MB), f"a new model folder needs a budget here: {folders}"
    over = {name: round(sum(size_mb(p) for p in _files(MODELS / name)), 2) for name in folders}
    over = {name: size for name, size in over.items() if size > MODEL_BUDGETS_MB[name]}
    assert not over, f"model folders over their budgets (MB; budgets {MODEL_BUDGETS_MB}): {over}"


def test_no_model_file_grows_past_its_budget():
    large = oversized(MODELS, FILE_BUDGET_MB)
    assert not large, f"files over {FILE_BUDGET_MB} MB under arabert_pipeline/models/: {large}"


def test_the_models_keep_the_wheel_under_the_ceiling():
    total = _models_mb()
    assert total <= MODELS_CEILING_MB, (f"arabert_pipeline/models/ takes {total:.1f} MB, over the "
                                        f"{MODELS_CEILING_MB} MB the wheel's ceiling leaves it")


def deflated_mb(folder: Path) -> float:
    """What the files under `folder` take deflated as a wheel (zip, zlib's default level) stores them."""
    import zlib

    total = 0
    for path in _files(folder):
        compressor = zlib.compressobj(6, zlib.DEFLATED, -15)
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 22), b""):
                total += len(compressor.compress(block))
        total += len(compressor.flush())
    return total / 1e6


@pytest.mark.slow
def test_the_models_fit_the_wheel_target():
    deflated = deflated_mb(MODELS)
    assert deflated <= WHEEL_TARGET_MB - OTHER_MB, (f"arabert_pipeline/models/ takes {deflated:.1f} MB deflated: the "
                                                    f"wheel would pass issue 53's {WHEEL_TARGET_MB} MB target")


def test_no_model_file_is_stored_twice():
    assert not copies(MODELS), f"files stored twice under arabert_pipeline/models/: {copies(MODELS)}"


def test_the_checks_catch_a_file_that_grows_and_a_copy(tmp_path):
    for name in ("m", "n"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "weights.bin").write_bytes(b"\1" * 200_000)
    assert oversized(tmp_path, 0.1) == {"m/weights.bin": 0.2, "n/weights.bin": 0.2}
    assert oversized(tmp_path, 1) == {}
    assert copies(tmp_path) == [("n/weights.bin", "m/weights.bin")]
