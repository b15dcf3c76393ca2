"""The shipped models stay within the wheel's budget (issue 53). Files are measured as they lie on disk: a wheel
deflates them, but int8 and fp16 weights barely compress (the models' 75.1 MB on disk take 64.5 MB in the wheel), so
the size on disk bounds the wheel's from above and costs nothing to read. PyPI refuses files over 100 MB; the issue's
target is a wheel of ≤ 60 MB, which the models do not meet yet (docs/experiments/compact-storage.md). So:

- each model folder and each file may not grow past what it takes now, plus a small margin: a model that must grow
  raises its number here in the same commit, with the reason;
- the models together stay ≤ MODELS_CEILING_MB, which keeps the wheel under PyPI's limit with room to spare;
- the 60 MB target is a strict xfail: the day the models fit it, the test passes, pytest reports the XPASS as a
  failure, and the budgets above come down to it;
- no file is stored twice (a task model that shares arabert-mini's tokenizer names it in tokenizer.shared.json).

.ci/install_check builds the wheel and checks its real size against the same ceiling.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

MODELS = Path(__file__).resolve().parents[1] / "arabert_pipeline" / "models"
WHEEL_TARGET_MB = 60
# The rest of the wheel (code, data files, the web page) takes ~0.6 MB deflated; 2 MB of room for it.
OTHER_MB = 2
MODELS_CEILING_MB = 100 - OTHER_MB  # PyPI's limit per file, less the rest of the wheel
# MB on disk per model folder: what each took when issue 53 stored it compactly (46.1, 13.9, 15.1), plus ~3%.
MODEL_BUDGETS_MB = {"arabert-mini": 47.5, "arabert-sentiment": 14.3, "arabert-ner": 15.5}
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


@pytest.mark.xfail(strict=True, reason="issue 53's 60 MB wheel target is not met yet (models 75.1 MB on disk, the "
                                       "wheel ~65 MB)")
def test_the_models_fit_the_wheel_target():
    assert _models_mb() <= WHEEL_TARGET_MB - OTHER_MB


def test_no_model_file_is_stored_twice():
    assert not copies(MODELS), f"files stored twice under arabert_pipeline/models/: {copies(MODELS)}"


def test_the_checks_catch_a_file_that_grows_and_a_copy(tmp_path):
    for name in ("m", "n"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "weights.bin").write_bytes(b"\1" * 200_000)
    assert oversized(tmp_path, 0.1) == {"m/weights.bin": 0.2, "n/weights.bin": 0.2}
    assert oversized(tmp_path, 1) == {}
    assert copies(tmp_path) == [("n/weights.bin", "m/weights.bin")]
