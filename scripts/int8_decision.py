"""Should a model serve int8 weights by default? Decided on dev (issue 26): fp32 and int8 (ONNX Runtime dynamic
quantization) answer the same dev questions; int8 becomes the model's default only if the paired ΔF1's 95% CI
includes 0 and at least 95% of the answers are unchanged. The decision is written into the model's
arabert_pipeline.json (`quantize_by_default`, with the numbers behind it), which `Pipeline(quantize=None)` reads.

    python scripts/int8_decision.py arabert_pipeline/models/arabert-mini --dev arcd-dev mlqa-ar-dev [--write]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from arabert_pipeline.artifacts.metadata import write_metadata
from arabert_pipeline.evaluate.metrics import paired_bootstrap
from arabert_pipeline.pipeline.core import Pipeline
from arabert_pipeline.qa.data import read_squad
from arabert_pipeline.qa.metrics import score_question

MIN_UNCHANGED = 0.95


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--dev", nargs="+", required=True)
    parser.add_argument("--write", action="store_true", help="record the decision in the model's metadata")
    args = parser.parse_args()
    examples = [e for source in args.dev for e in read_squad(source, misaligned="keep").examples]
    answers = {}
    for quantize in (False, True):
        pipeline = Pipeline(args.model, backend="onnx", quantize=quantize)
        answers[quantize] = pipeline.answer([e["question"] for e in examples], [e["context"] for e in examples])
    scores = {q: np.array([[score_question(e, a and a.text, a and a.start)["soqal_f1"]]
                           for e, a in zip(examples, found, strict=True)]) for q, found in answers.items()}
    paired = paired_bootstrap(scores[True], scores[False])
    unchanged = float(np.mean([(a and (a.start, a.end)) == (b and (b.start, b.end))
                               for a, b in zip(answers[False], answers[True], strict=True)]))
    decision = bool(paired["low"][0] <= 0 <= paired["high"][0] and unchanged >= MIN_UNCHANGED)
    record = {"quantize_by_default": decision, "int8_decision": {
        "dev": args.dev, "questions": len(examples), "fp32_f1": round(100 * float(scores[False].mean()), 2),
        "int8_f1": round(100 * float(scores[True].mean()), 2),
        "delta_f1": [round(float(paired[k][0]), 2) for k in ("diff", "low", "high")],
        "answers_unchanged": round(unchanged, 4),
        "rule": f"int8 when the paired ΔF1 CI includes 0 and ≥ {MIN_UNCHANGED:.0%} of answers are unchanged"}}
    print(json.dumps(record, ensure_ascii=False, indent=2))
    if args.write:
        write_metadata(Path(args.model), **record)


if __name__ == "__main__":
    main()
