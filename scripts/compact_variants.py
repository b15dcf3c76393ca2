"""How finely must the shipped QA model's weights be stored to keep its dev answers? The exploration behind issue 53's
storage choices (docs/experiments/compact-storage.md): each variant stores the transformer's large 2-D tensors in
int8 (per row, or per block of N values of a row) or leaves them, or takes a model dir as it is (a reader variant),
and answers the dev questions; what it prints is compared with the shipped model's answers (identical share, ΔF1).

    python scripts/compact_variants.py SHIPPED_DIR WORK_DIR emb:row:no emb16:16:no all:row:row /path/to/model_dir ...

A variant NAME:EMBEDDINGS:LINEAR names the storage of the embedding tables and of the other large 2-D weights: `no` (as
shipped, fp16), `row` (int8, one scale per row), a block size, or for the embeddings `topK` (int8 rows but the K tokens
most frequent in --frequency-corpus, kept as stored: scripts/compact_models.py's form). The relative-position table goes
with LINEAR (the rows of variants.jsonl written before the topK variants put it with EMBEDDINGS). To be cheap it writes
the int8 values widened back, as float32 safetensors (the same values the int8 form computes with, to float32 rounding),
and re-exports model.onnx; scripts/compact_gate.py then gates the form a change ships in, with its cold start. Dev only.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compact_gate import qa_answers

DEV = ["arcd-dev", "mlqa-ar-dev"]


def widened(values: np.ndarray, storage: str, frequent: np.ndarray | None) -> np.ndarray:
    from arabert_pipeline.weights.rows import dequantize_rows, quantize_rows

    if storage.startswith("top"):
        out = dequantize_rows(*quantize_rows(values))
        kept = frequent[: int(storage[3:])]
        out[kept] = values[kept]
        return out
    return dequantize_rows(*quantize_rows(values, None if storage == "row" else int(storage)))


def variant(shipped: Path, work: Path, name: str, embeddings: str, linear: str, frequent) -> Path:
    from safetensors.numpy import load_file, save_file

    directory = work / name
    shutil.rmtree(directory, ignore_errors=True)
    shutil.copytree(shipped, directory)
    out = {}
    for key, values in load_file(str(directory / "model.safetensors")).items():
        storage = embeddings if "word_embeddings" in key else linear
        if values.ndim == 2 and values.size >= 1 << 16 and storage != "no":
            out[key] = widened(values.astype(np.float32), storage, frequent)
        else:
            out[key] = values.astype(np.float32)
    save_file(out, str(directory / "model.safetensors"), metadata={"format": "pt"})
    subprocess.run([sys.executable, "-m", "arabert_pipeline.cli", "export-onnx", str(directory)], check=True,
                   capture_output=True)
    return directory


def top_answers(model: Path) -> list[list[tuple]]:
    """(start, end, score) of each dev question's 5 best answers, as `Pipeline(model)` gives them."""
    from arabert_pipeline.pipeline.core import Pipeline
    from arabert_pipeline.qa.data import read_squad

    examples = [e for source in DEV for e in read_squad(source, misaligned="keep").examples]
    found = Pipeline(str(model)).answer([e["question"] for e in examples], [e["context"] for e in examples], top_k=5)
    return [[(a.start, a.end, a.score) for a in (row or [])] for row in found]


def score_drift(base: list[list[tuple]], other: list[list[tuple]]) -> dict:
    """How far the scores moved, which the count of changed answers hides: most near-ties do not flip."""
    best = [abs(a[0][2] - b[0][2]) for a, b in zip(base, other, strict=True) if a and b]
    same_lists = [[x[:2] for x in a] == [y[:2] for y in b] for a, b in zip(base, other, strict=True)]
    return {"mean_abs_best_score_change": round(float(np.mean(best)), 5),
            "top5_identical": round(float(np.mean(same_lists)), 4)}


def main() -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("shipped", type=Path)
    parser.add_argument("work", type=Path)
    parser.add_argument("specs", nargs="+")
    parser.add_argument("--frequency-corpus", type=Path, help="preprocessed text for the topK embedding variants")
    parser.add_argument("--score-drift", action="store_true",
                        help="also the mean |change| of the best answer's score and the share of identical top-5 lists")
    args = parser.parse_args()
    shipped, work, specs = args.shipped, args.work, args.specs
    frequent = None
    if args.frequency_corpus:
        from compact_models import most_frequent_tokens

        frequent = most_frequent_tokens(shipped, args.frequency_corpus, 1 << 30)
    work.mkdir(parents=True, exist_ok=True)
    cache = work / "shipped-answers.json"
    if cache.is_file():
        saved = json.loads(cache.read_text())
        base, base_f1 = [tuple(k) if k else k for k in saved["keys"]], saved["f1"]
    else:
        base, base_f1 = qa_answers(str(shipped), DEV)
        cache.write_text(json.dumps({"keys": base, "f1": base_f1}))
    base_top = top_answers(shipped) if args.score_drift else None
    for spec in specs:
        if "/" in spec:
            directory, name = Path(spec), spec
        else:
            name, embeddings, linear = spec.split(":")
            if embeddings.startswith("top") and frequent is None:
                parser.error(f"{spec}: topK variants need --frequency-corpus")
            directory = variant(shipped, work, name, embeddings, linear, frequent)
        keys, f1 = qa_answers(str(directory), DEV)
        same = float(np.mean([a == (tuple(b) if b else b) for a, b in zip(base, keys, strict=True)]))
        row = {"variant": name, "identical": round(same, 4), "f1": round(f1, 2), "delta_f1": round(f1 - base_f1, 2)}
        if args.score_drift:
            row.update(score_drift(base_top, top_answers(directory)))
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
