"""Write the shipped models in their compact storage (issue 53) from a previous shipped form: the changes that
passed scripts/compact_gate.py on dev (docs/experiments/compact-storage.md), nothing else. A step already done in
SOURCE_MODELS is left as it is, so the script takes the models as shipped before issue 53 or as shipped since.

    python scripts/compact_models.py SOURCE_MODELS TARGET_MODELS \
        [--transformer-int8 --exact-rows K --frequency-corpus PREPROCESSED.txt]

SOURCE_MODELS holds arabert-mini/, arabert-sentiment/ and arabert-ner/ as shipped before (e.g. `git archive` of the
parent commit); TARGET_MODELS must not exist. What it does:

- arabert-mini/reader/: the word table as int8 rows with float32 row scales (vector_scales.npy), reader.onnx's fp32
  weights as int8 rows widened in the graph at load (qa/transformer/companion.py `compact_companion`).
- arabert-mini's transformer, with --transformer-int8: its linear weights and relative-position table as int8 rows
  (one scale per output row), its word-embedding table as int8 rows but for the K tokens most frequent in
  PREPROCESSED.txt (text as `arabert-pipeline preprocess` writes it, tokenized with the model's tokenizer, [CLS] and
  [SEP] counted once a line), which keep their fp16 rows (weights.py's exact rows); model.onnx re-exported.
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
    parser.add_argument("--transformer-int8", action="store_true",
                        help="store arabert-mini's transformer in int8 rows, the frequent tokens' embeddings exact")
    parser.add_argument("--exact-rows", type=int, default=4000, metavar="K",
                        help="word embeddings kept in fp16: the K most frequent tokens of --frequency-corpus")
    parser.add_argument("--frequency-corpus", type=Path, help="preprocessed text the token frequencies come from")
    args = parser.parse_args()
    if args.transformer_int8 and args.frequency_corpus is None:
        parser.error("--transformer-int8 needs --frequency-corpus")
    import onnx

    from arabert_pipeline.finetuning.tokenizer_adapter import share_tokenizer
    from arabert_pipeline.qa.transformer.companion import compact_companion
    from arabert_pipeline.weights import compact, compact_graph, storage_of

    shutil.copytree(args.source, args.target)
    mini = args.target / "arabert-mini"
    compact_companion(mini)
    weights = mini / "model.safetensors"
    if args.transformer_int8 and storage_of(weights) is None:
        frequent = most_frequent_tokens(mini, args.frequency_corpus, args.exact_rows)
        staged = weights.with_name("model.int8.tmp")
        counts = compact(weights, staged, exact_rows={"word_embeddings": frequent})
        staged.chmod(0o644)
        staged.replace(weights)
        print(f"{weights}: {counts['quantized']} tensors in int8 rows, {len(frequent)} embedding rows kept in fp16")
        subprocess.run([sys.executable, "-m", "arabert_pipeline.cli", "export-onnx", str(mini), "--overwrite"],
                       check=True)
    graph_path = args.target / "arabert-sentiment" / "model.onnx"
    graph = onnx.load(str(graph_path))
    if compact_graph(graph):
        onnx.save(graph, str(graph_path))
    for name in ("arabert-sentiment", "arabert-ner"):
        if (args.target / name / "tokenizer.json").is_file():
            share_tokenizer(args.target / name, mini)
    for path in sorted(args.target.rglob("*")):
        if path.is_file() and path.stat().st_size > 1e6:
            print(f"{path.relative_to(args.target)}: {path.stat().st_size / 1e6:.2f} MB")
    return 0


def most_frequent_tokens(model_dir: Path, corpus: Path, count: int):
    """The ids of the `count` tokens most frequent in `corpus` (one preprocessed text a line) as `model_dir`'s
    tokenizer splits it, [CLS] and [SEP] included as every input has them; ties by id."""
    import numpy as np
    from tokenizers import Tokenizer

    from arabert_pipeline.weights import read_tokenizer_json

    tokenizer = Tokenizer.from_str(read_tokenizer_json(model_dir)[0])
    tokenizer.no_truncation()
    tokenizer.no_padding()
    lines = [line for line in corpus.read_text(encoding="utf-8").splitlines() if line.strip()]
    counts = np.zeros(tokenizer.get_vocab_size(), dtype=np.int64)
    for encoding in tokenizer.encode_batch(lines):
        np.add.at(counts, encoding.ids, 1)
    return np.argsort(-counts, kind="stable")[:count]


if __name__ == "__main__":
    raise SystemExit(main())
