"""The polysemy contrast on the shipped encoder: static vs contextual vectors of Arabic homographs.

    python scripts/polysemy.py                       # arabert-mini, data/polysemy/ar_homographs.jsonl
    python scripts/polysemy.py --model runs/qa --static runs/ft -o runs/polysemy

Writes polysemy.md (the table), polysemy.json and pca.png into notebooks/results/polysemy/ (or -o). See
arabert_pipeline/embeddings/polysemy.py for what is measured.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from arabert_pipeline.cli import setup_logging
    from arabert_pipeline.embeddings.polysemy import run_polysemy
    from arabert_pipeline.errors import ArabertPipelineError

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=str(REPO / "arabert_pipeline" / "models" / "arabert-mini"),
                        help="a model directory of ours (default: the shipped arabert-mini)")
    parser.add_argument("--data", default=str(REPO / "data" / "polysemy" / "ar_homographs.jsonl"))
    parser.add_argument("--static", metavar="DIR", help="also measure a train-embeddings directory's vectors")
    parser.add_argument("-o", "--output", default=str(REPO / "notebooks" / "results" / "polysemy"))
    parser.add_argument("--overwrite", action="store_true", help="replace earlier results in -o")
    args = parser.parse_args(argv)
    setup_logging()
    try:
        report = run_polysemy(args.model, args.data, args.output, static_embeddings=args.static,
                              overwrite=args.overwrite)
    except ArabertPipelineError as exc:
        print(f"polysemy: error: {exc}", file=sys.stderr)
        return 2
    for name, result in report["results"].items():
        print(f"{name:28s} accuracy {result['accuracy']:.3f} (chance {result['chance']:.3f})  same-sense cos "
              f"{result['same_sense_cosine']:.3f}  cross-sense cos {result['cross_sense_cosine']:.3f}")
    print(f"wrote {args.output}/polysemy.md, polysemy.json, pca.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
