"""evaluate --task classification --metric f1:LABEL: the sarcasm task's official score (F1 of the sarcastic class)
listed first, compared pairwise and reported with its CI."""
from __future__ import annotations

import json

from arabert_pipeline.evaluate.tasks import TaskEvaluateConfig, run_task_evaluation


def test_a_class_f1_is_the_main_metric(tmp_path):
    rows = [("نص ساخر جدا", "TRUE"), ("نص عادي", "FALSE"), ("كلام عادي", "FALSE"), ("سخرية واضحة", "TRUE"),
            ("خبر عادي", "FALSE"), ("تعليق عادي", "FALSE")]
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"id": i, "text": t, "label": y}, ensure_ascii=False) + "\n"
                            for i, (t, y) in enumerate(rows)), encoding="utf-8")
    predicted = tmp_path / "p.jsonl"  # one sarcastic text found, one missed, one false alarm
    labels = ["TRUE", "FALSE", "TRUE", "FALSE", "FALSE", "FALSE"]
    predicted.write_text("".join(json.dumps({"id": str(i), "label": y}) + "\n" for i, y in enumerate(labels)),
                         encoding="utf-8")
    results = run_task_evaluation(TaskEvaluateConfig(
        task="classification", data=[str(data)], out=tmp_path / "out", systems=[("predictions", str(predicted))],
        train=[str(data)], baselines=("majority",), metric="f1:TRUE", resamples=200), log=lambda _: None)
    assert results["metrics"] == ["f1:TRUE", "macro_f1", "accuracy"]
    (entry,) = results["datasets"].values()
    rows = entry["systems"]
    assert abs(rows["p.jsonl"]["scores"]["f1:TRUE"] - 50.0) < 1e-9
    assert rows["majority"]["scores"]["f1:TRUE"] == 0.0 and "f1:TRUE" in rows["majority"]["vs_reference"]
    assert "f1:TRUE" in (tmp_path / "out" / "table.md").read_text(encoding="utf-8")
