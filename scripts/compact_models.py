"""Write the shipped models in their compact storage (issue 53) from a previous shipped form: the changes that
passed scripts/compact_gate.py on dev (docs/experiments/compact-storage.md), nothing else. A step already done in
SOURCE_MODELS is left as it is, so the script takes the models as shipped before issue 53 or as shipped since.

    python scripts/compact_models.py SOURCE_MODELS TARGET_MODELS \
        [--transformer-int8 --exact-rows K --frequency-corpus PREPROCESSED.txt] \
        [--sentiment-rare-rows --sentiment-kept-rows K --sentiment-frequency-data arsarcasm-v2-train-rest] \
        [--reader-int8-words N]

SOURCE_MODELS holds arabert-mini/, arabert-sentiment/ and arabert-ner/ as shipped before (e.g. `git archive` of the
parent commit); TARGET_MODELS must not exist. What it does:

- arabert-mini/reader/: the word table as int8 rows with float32 row scales (vector_scales.npy), reader.onnx's fp32
  weights as int8 rows widened in the graph at load (qa/transformer/companion.py `compact_companion`); with
  --reader-int8-words N, the rows of the words past the N most frequent (words.txt's order) in 4-bit.
- arabert-mini's transformer, with --transformer-int8: its linear weights and relative-position table as int8 rows
  (one scale per output row), its word-embedding table as int8 rows but for the K tokens most frequent in
  PREPROCESSED.txt (text as `arabert-pipeline preprocess` writes it, tokenized with the model's tokenizer, [CLS] and
  [SEP] counted once a line), which keep their fp16 rows (weights/rows.py's exact rows); model.onnx re-exported.
- arabert-sentiment/model.onnx: its fp32 relative-position tables as int8 rows (weights.rows.compact_graph); with
  --sentiment-rare-rows, its uint8 word-embedding table split: the K tokens most frequent in the training texts
  (the named set, preprocessed as the model preprocesses) keep their uint8 rows, the others in 4-bit blocks
  (finetuning/runtime.py `int4_rare_rows`).
- arabert-sentiment/, arabert-ner/: tokenizer.json replaced by tokenizer.shared.json naming arabert-mini's identical
  file, with its digest.
"""
from __future__ import annotations

import argparse
import json
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
    parser.add_argument("--sentiment-rare-rows", action="store_true",
                        help="store arabert-sentiment's rare-token embeddings in 4-bit, the frequent ones as they are")
    parser.add_argument("--sentiment-kept-rows", type=int, default=4000, metavar="K",
                        help="embedding rows kept in uint8: the K tokens most frequent in --sentiment-frequency-data")
    parser.add_argument("--sentiment-frequency-data", default="arsarcasm-v2-train-rest",
                        help="the named text set the sentiment model was trained on (default %(default)s)")
    parser.add_argument("--reader-int8-words", type=int, metavar="N",
                        help="the reader's rows of words past the N most frequent in 4-bit (one scale a row)")
    args = parser.parse_args()
    if args.transformer_int8 and args.frequency_corpus is None:
        parser.error("--transformer-int8 needs --frequency-corpus")
    import onnx

    from arabert_pipeline.finetuning.runtime import int4_rare_rows
    from arabert_pipeline.qa.transformer.companion import compact_companion
    from arabert_pipeline.weights.header import storage_of
    from arabert_pipeline.weights.rows import compact, compact_graph
    from arabert_pipeline.weights.shared_tokenizer import share_tokenizer

    shutil.copytree(args.source, args.target)
    mini = args.target / "arabert-mini"
    reader_config = json.loads((mini / "reader" / "reader.json").read_text(encoding="utf-8"))
    if reader_config.get("int4_rows") and args.reader_int8_words is not None:
        print(f"{mini / 'reader'}: its rarer rows are 4-bit already ({reader_config['int4_rows']}): left as they are")
    compact_companion(mini, int8_words=None if reader_config.get("int4_rows") else args.reader_int8_words)
    weights = mini / "model.safetensors"
    if args.transformer_int8 and storage_of(weights) is None:
        lines = args.frequency_corpus.read_text(encoding="utf-8").splitlines()
        frequent = most_frequent_tokens(mini, lines, args.exact_rows)
        staged = weights.with_name("model.int8.tmp")
        counts = compact(weights, staged, exact_rows={"word_embeddings": frequent})
        staged.chmod(0o644)
        staged.replace(weights)
        print(f"{weights}: {counts['quantized']} tensors in int8 rows, {len(frequent)} embedding rows kept in fp16")
        subprocess.run([sys.executable, "-m", "arabert_pipeline.cli", "export-onnx", str(mini), "--overwrite"],
                       check=True)
    graph_path = args.target / "arabert-sentiment" / "model.onnx"
    graph = onnx.load(str(graph_path))
    # The 4-bit rows' fp32 scales are the kind of table compact_graph re-stores: it runs before them, once.
    rare_rows_done = any(tensor.name.endswith("/int4_rows") for tensor in graph.graph.initializer)
    changed = not rare_rows_done and compact_graph(graph)
    if rare_rows_done and args.sentiment_rare_rows:
        print(f"{graph_path}: its embedding rows are split already: left as they are")
    if args.sentiment_rare_rows and not rare_rows_done:
        frequent = most_frequent_tokens(mini, training_texts(graph_path.parent, args.sentiment_frequency_data),
                                        args.sentiment_kept_rows)
        table = int4_rare_rows(graph, frequent)
        print(f"{graph_path}: {table} in 4-bit but for the {len(frequent)} most frequent tokens' rows")
        changed = True
    if changed:
        onnx.save(graph, str(graph_path))
    for name in ("arabert-sentiment", "arabert-ner"):
        if (args.target / name / "tokenizer.json").is_file():
            share_tokenizer(args.target / name, mini)
    for path in sorted(args.target.rglob("*")):
        if path.is_file() and path.stat().st_size > 1e6:
            print(f"{path.relative_to(args.target)}: {path.stat().st_size / 1e6:.2f} MB")
    return 0


def training_texts(model_dir: Path, dataset: str) -> list[str]:
    """The texts of a named set (e.g. arsarcasm-v2-train-rest), preprocessed as `model_dir`'s metadata says."""
    from arabert_pipeline.artifacts.metadata import read_metadata
    from arabert_pipeline.classification.data import read_texts
    from arabert_pipeline.preprocess.preprocessor import Preprocessor

    metadata = read_metadata(model_dir)
    preprocessor = Preprocessor(metadata["preprocessing"])
    examples = read_texts(dataset, label_column=metadata.get("label_column")).examples
    return [preprocessor.preprocess(example["text"]) for example in examples]


def most_frequent_tokens(model_dir: Path, lines: list[str], count: int):
    """The ids of the `count` tokens most frequent in `lines` (preprocessed texts) as `model_dir`'s tokenizer splits
    them, [CLS] and [SEP] included as every input has them; ties by id."""
    import numpy as np
    from tokenizers import Tokenizer

    from arabert_pipeline.weights.shared_tokenizer import read_tokenizer_json

    tokenizer = Tokenizer.from_str(read_tokenizer_json(model_dir)[0])
    tokenizer.no_truncation()
    tokenizer.no_padding()
    lines = [line for line in lines if line.strip()]
    counts = np.zeros(tokenizer.get_vocab_size(), dtype=np.int64)
    for encoding in tokenizer.encode_batch(lines):
        np.add.at(counts, encoding.ids, 1)
    return np.argsort(-counts, kind="stable")[:count]


if __name__ == "__main__":
    raise SystemExit(main())
