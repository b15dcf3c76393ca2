"""Shared fixtures. Tests that need the real data find it in ../shared/data (CI has it there)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("ARABERT_PIPELINE_TEST_DATA", REPO.parent / "shared" / "data"))
SAMPLES = REPO / "data"


@pytest.fixture(autouse=True)
def _data_root(monkeypatch):
    """Point the package's data root at the shared data, so dataset names resolve the way they do for users."""
    monkeypatch.setenv("ARABERT_PIPELINE_DATA", str(SHARED_DATA))


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"needs the shared data at {SHARED_DATA} (set ARABERT_PIPELINE_TEST_DATA to use another folder)")
    return SHARED_DATA


@pytest.fixture
def samples() -> Path:
    return SAMPLES
