"""Write the shipped models in their compact storage (issue 53) from their previous shipped form: the changes that
passed scripts/compact_gate.py on dev (docs/experiments/compact-storage.md), nothing else.

    python scripts/compact_models.py SOURCE_MODELS TARGET_MODELS [--transformer-embeddings-block N]

SOURCE_MODELS holds arabert-mini/, arabert-sentiment/ and arabert-ner/ as shipped before (e.g. `git archive` of the
parent commit); TARGET_MODELS must not exist. What it does:

- arabert-mini/reader/: the word table as int8 rows with float32 row scales (vector_scales.npy), reader.onnx's fp32
  weights as int8 rows widened in the graph at load (qa/transformer/companion.py `compact_companion`).
- arabert-mini's transformer, when --transformer-embeddings-block is given: the word-embedding table as int8 in blocks
  of N values (one float32 scale each), looked up before it is widened; model.onnx re-exported.
- arabert-sentiment/model.onnx: its fp32 relative-position tables as int8 rows (weights.compact_graph).
- arabert-sentiment/, arabert-ner/: tokenizer.json replaced by tokenizer.shared.json naming arabert-mini's identical
  file, with its digest.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path)
    parser.add_argument("target", type=Path)
    parser.add_argument("--transformer-embeddings-block", type=int, default=None)
    args = parser.parse_args()
    import onnx

    from arabert_pipeline.finetuning.tokenizer_adapter import share_tokenizer
    from arabert_pipeline.qa.transformer.companion import compact_companion
    from arabert_pipeline.weights import compact, compact_graph

    shutil.copytree(args.source, args.target)
    mini = args.target / "arabert-mini"
    compact_companion(mini)
    if args.transformer_embeddings_block:
        weights = mini / "model.safetensors"
        staged = weights.with_name("model.int8.tmp")
        compact(weights, staged, only=("word_embeddings",),
                blocks={"word_embeddings": args.transformer_embeddings_block})
        staged.chmod(0o644)
        staged.replace(weights)
        subprocess.run([sys.executable, "-m", "arabert_pipeline.cli", "export-onnx", str(mini)], check=True)
    graph_path = args.target / "arabert-sentiment" / "model.onnx"
    graph = onnx.load(str(graph_path))
    if compact_graph(graph):
        onnx.save(graph, str(graph_path))
    for name in ("arabert-sentiment", "arabert-ner"):
        share_tokenizer(args.target / name, mini)
    for path in sorted(args.target.rglob("*")):
        if path.is_file() and path.stat().st_size > 1e6:
            print(f"{path.relative_to(args.target)}: {path.stat().st_size / 1e6:.2f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
