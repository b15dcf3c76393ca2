#!/usr/bin/env bash
# Reproduces the shipped default QA model (arabert_pipeline/models/arabert-mini) from scratch with this package's own
# stages: preprocess → train-tokenizer → pretrain (ELECTRA) → finetune (offline protocol) → evaluate → ship.
# Usage: ARABERT_PIPELINE_DATA=../shared/data bash scripts/train_default_model.sh [RUNS_DIR]
# Set PRETRAIN_STEPS to train longer than the shipped model did (see its README.md for the budget it had).
set -euo pipefail
: "${ARABERT_PIPELINE_DATA:?point ARABERT_PIPELINE_DATA at the data root (corpus/, qa/)}"
runs=${1:-runs}
steps=${PRETRAIN_STEPS:-500}
corpus=$ARABERT_PIPELINE_DATA/corpus
ship=arabert_pipeline/models/arabert-mini

# 1. Farasa-segmented corpus; ant-multisource-006 is held out (tokenizer report, held-out MLM checks).
arabert-pipeline preprocess $(ls "$corpus"/*.txt.xz | sort | grep -v ant-multisource-006) \
    -o "$runs/corpus/train.arabertv2.txt" --config arabertv2 --workers 2
# 2. Segmented SentencePiece unigram, 32k pieces (the AraBERTv1 recipe at a CPU-friendly vocabulary size).
arabert-pipeline train-tokenizer "$runs/corpus/train.arabertv2.txt" -o "$runs/tokenizers/unigram-seg-32k" \
    --model-type unigram --vocab-size 32000
# 3. ELECTRA (GDES embedding sharing) L4/H256 discriminator, 256-token sequences so that QA windows of 256 only use
#    trained position embeddings. The shipped model was fine-tuned from checkpoints/step-00000099 of this schedule
#    (the session's CPU time ran out there): fine-tune from that checkpoint's model/ to reproduce it exactly.
arabert-pipeline pretrain --tokenizer "$runs/tokenizers/unigram-seg-32k" --corpus "$runs/corpus/train.arabertv2.txt" \
    -o "$runs/pretrain/mini-seg32k-electra" --objective electra --model-size mini --max-seq-length 256 \
    --whole-word-masking --steps "$steps" --batch-size 32 --grad-accum 2 --lr 8e-4 --warmup 0.06 --seed 0 --save-every 25
# 4. QA fine-tuning, offline protocol (ARCD-train + XQuAD-ar + MLQA-ar-dev), without the training questions whose
#    contexts leak into ARCD-test / TyDiQA-GoldP-ar-dev.
arabert-pipeline finetune --model "$runs/pretrain/mini-seg32k-electra" --protocol offline \
    -o "$runs/qa/mini-seg32k-electra" --max-seq-length 256 --doc-stride 128 --epochs 1 --lr 3e-4 --batch-size 32 \
    --skip-misaligned --drop-leaking-train --seed 0
# 5. Side-by-side report with the reference baselines.
arabert-pipeline evaluate --model "$runs/qa/mini-seg32k-electra" --label arabert-mini \
    --data arcd-test --data tydiqa-goldp-ar-dev -o "$runs/eval/arabert-mini"
# 6. Ship: the Hugging Face files only (no checkpoints), weights in fp16.
python - "$runs/qa/mini-seg32k-electra" "$ship" <<'PY'
import shutil, sys
from pathlib import Path
from safetensors.torch import load_file, save_file
source, target = Path(sys.argv[1]), Path(sys.argv[2])
target.mkdir(parents=True, exist_ok=True)
for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "arabert_pipeline.json", "sentencepiece.model"):
    if (source / name).exists():
        shutil.copy2(source / name, target / name)
weights = load_file(source / "model.safetensors")
save_file({k: v.half().contiguous() for k, v in weights.items()}, target / "model.safetensors", metadata={"format": "pt"})
PY
echo "shipped to $ship; write its README.md (model card) from $runs/eval/arabert-mini/table.md"
