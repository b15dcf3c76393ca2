"""scripts/train_default_model.sh, every stage at tiny size on the shared-data slices: the one command that rebuilds
the shipped default (preprocess → tokenizer → pretrain + continuation → synthetic QA → two fine-tuning stages → reader
→ tune-decoding → dev and test reports → ship → ONNX → int8 decision) runs end to end and ships a model that answers."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, SLICES

SCRIPT = REPO / "scripts" / "train_default_model.sh"


@pytest.mark.slow
def test_the_default_recipe_runs_end_to_end_and_ships_a_model_that_answers(tmp_path):
    ship, report = tmp_path / "ship", tmp_path / "report"
    env = dict(os.environ, ARABERT_PIPELINE_DATA=str(SLICES), SHIP=str(ship), REPORT=str(report),
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
               VOCAB_SIZE="800", PRETRAIN_SIZE="L2-H64", PRETRAIN_STEPS="12", PRETRAIN_BATCH="8", PRETRAIN_LR="1e-3",
               CONTINUE_STEPS="6", READER_EPOCHS="2", OMP_NUM_THREADS="1")
    ran = subprocess.run(["bash", str(SCRIPT), str(tmp_path / "runs")], cwd=REPO, env=env, capture_output=True,
                         text=True, timeout=1500)
    assert ran.returncode == 0, ran.stdout[-4000:] + ran.stderr[-4000:]

    metadata = json.loads((ship / "arabert_pipeline.json").read_text())
    assert metadata["task"] == "question-answering"
    assert metadata["decoding_tuned_by"] == "tune-decoding"
    assert isinstance(metadata["leading_words"], list)
    assert metadata["calibration"] is not None
    assert isinstance(metadata["quantize_by_default"], bool)  # the int8 decision was written
    assert (ship / "reader" / "reader.onnx").is_file() and (ship / "model.onnx").is_file()
    assert not list(ship.glob("checkpoint*"))

    from arabert_pipeline import Pipeline

    context = "تأسست مدينة الرياض عام 1746 في نجد، وهي عاصمة المملكة العربية السعودية."
    answer = Pipeline(str(ship)).answer("متى تأسست الرياض؟", context)
    assert answer is not None and context[answer.start:answer.end] == answer.text and 0 < answer.score <= 1

    dev_table = (Path(f"{report}-dev") / "table.md").read_text()
    assert "arabert-mini (shipped)" in dev_table and "tfidf-sentence" in dev_table
    results = json.loads((report / "results.json").read_text())
    assert set(results["datasets"]) == {"arcd-test", "tydiqa-goldp-ar-dev"}
    assert (report / "pooled.md").read_text().strip()
