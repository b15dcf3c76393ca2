#!/usr/bin/env bash
# MLM vs ELECTRA, each alone and each followed by span-selection pretraining, at equal CPU budget: two L4/H256 models
# on the same normalized corpus and unigram tokenizer as the shipped model, pretrained side by side on one core each
# (same machine, same minutes, same load), then each continued by span selection, all four fine-tuned with the
# `offline` QA protocol, then one side-by-side report with the pretraining logs and paired tests.
# Usage: ARABERT_PIPELINE_DATA=../shared/data bash scripts/compare_objectives.sh [RUNS_DIR]
# The report goes to $REPORT (default notebooks/results/objectives, the committed one; rerun the notebook after).
# PRETRAIN_MINUTES (default 80) and SS_MINUTES (default 12) are wall-clock budgets per run; each run re-plans its
# learning-rate schedule to end on time. Rerun after an interruption: finished stages are skipped and an interrupted
# pretraining resumes from its last checkpoint (its budget counts the time already spent).
set -euo pipefail
: "${ARABERT_PIPELINE_DATA:?point ARABERT_PIPELINE_DATA at the data root (corpus/, qa/)}"
runs=${1:-runs}
pretrain_minutes=${PRETRAIN_MINUTES:-80}
ss_minutes=${SS_MINUTES:-12}
corpus=$ARABERT_PIPELINE_DATA/corpus
text=$runs/corpus/train.arabertv02.txt
tokenizer=$runs/tokenizers/noseg-unigram
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1

[ -f "$text" ] || arabert-pipeline preprocess $(ls "$corpus"/*.txt.xz | sort | grep -v ant-multisource-006) \
    -o "$text" --preprocessing arabertv02 --workers 2
[ -f "$tokenizer/tokenizer.json" ] || arabert-pipeline train-tokenizer "$text" -o "$tokenizer" --model-type unigram \
    --vocab-size 32000

resume_flag() { [ -d "$1/checkpoints" ] && echo --resume || true; }
pretrain() {  # output objective minutes extra-flags...
    [ -f "$1/model.safetensors" ] && return
    arabert-pipeline pretrain --tokenizer "$tokenizer" --corpus "$text" -o "$1" --objective "$2" \
        --max-seq-length 256 --batch-size 32 --time-budget "$3" --seed 0 --save-every 50 --eval-every 100 \
        --log-every 10 --no-progress $(resume_flag "$1") "${@:4}"
}
# Each objective at its own recommended settings: MLM as the shipped model (lr 8e-4, 6% warm-up, whole-word
# masking); ELECTRA at the ELECTRA-Small learning rate (5e-4, 10% warm-up) with separate embeddings, the sharing
# variant whose discriminator did not collapse in the short runs (docs/experiments/objectives.md).
pretrain "$runs/pretrain/cmp-mlm" mlm "$pretrain_minutes" --model-size mini --whole-word-masking --lr 8e-4 \
    --warmup 0.06 &
pretrain "$runs/pretrain/cmp-electra" electra "$pretrain_minutes" --model-size mini --whole-word-masking --lr 5e-4 \
    --warmup 0.1 --electra-embedding-sharing none &
wait
for base in mlm electra; do
    pretrain "$runs/pretrain/cmp-$base-ss" span-selection "$ss_minutes" --init-from "$runs/pretrain/cmp-$base" \
        --lr 2e-4 --warmup 0.1 &
done
wait
finetune() {  # name
    [ -f "$runs/qa/cmp-$1/model.safetensors" ] && return
    arabert-pipeline finetune --model "$runs/pretrain/cmp-$1" --protocol offline -o "$runs/qa/cmp-$1" \
        --max-seq-length 256 --doc-stride 128 --epochs 2 --lr 3e-4 --batch-size 32 --skip-misaligned \
        --drop-leaking-train --seed 0 --no-progress
}
for pair in "mlm electra" "mlm-ss electra-ss"; do
    for name in $pair; do finetune "$name" & done
    wait
done
models=() labels=() logs=()
for name in mlm electra mlm-ss electra-ss; do
    models+=(--model "$runs/qa/cmp-$name") labels+=(--label "$name")
    logs+=(--pretraining-log "$name=$runs/pretrain/cmp-$name/log.jsonl")
done
arabert-pipeline evaluate "${models[@]}" "${labels[@]}" --data arcd-test --data tydiqa-goldp-ar-dev "${logs[@]}" \
    -o "${REPORT:-notebooks/results/objectives}" --overwrite
