#!/usr/bin/env bash
# MLM vs ELECTRA at equal CPU budget: two L4/H256 models on the same Farasa-segmented corpus and unigram tokenizer,
# pretrained side by side on one core each (two single-threaded runs on a 2-core machine get more tokens through than
# one run on two threads), each fine-tuned with the `offline` QA protocol, then one side-by-side report with both
# pretraining logs. This is how the README's objective comparison was produced.
# Usage: ARABERT_PIPELINE_DATA=../shared/data bash scripts/compare_objectives.sh [RUNS_DIR]
# Set MLM_STEPS / ELECTRA_STEPS to the steps that fit your budget: an ELECTRA step costs ~1.15x an MLM step.
# The README's runs: MLM 1,550 steps (93 min on one core); ELECTRA first at lr 8e-4 for 1,350 steps (its discriminator
# collapsed by step 100; stopped at step 700), then at lr 3e-4 with warm-up 0.1 for 665 steps (--time-budget 40,
# what was left of the session), i.e. ELECTRA_STEPS=665.
set -euo pipefail
: "${ARABERT_PIPELINE_DATA:?point ARABERT_PIPELINE_DATA at the data root (corpus/, qa/)}"
runs=${1:-runs}
corpus=$ARABERT_PIPELINE_DATA/corpus
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1

if [ ! -f "$runs/corpus/train.arabertv2.txt" ]; then
    arabert-pipeline preprocess $(ls "$corpus"/*.txt.xz | sort | grep -v ant-multisource-006) \
        -o "$runs/corpus/train.arabertv2.txt" --config arabertv2 --workers 2
fi
if [ ! -f "$runs/tokenizers/unigram-seg-32k/tokenizer.json" ]; then
    arabert-pipeline train-tokenizer "$runs/corpus/train.arabertv2.txt" -o "$runs/tokenizers/unigram-seg-32k" \
        --model-type unigram --vocab-size 32000
fi

pretrain() {  # objective steps lr warmup
    arabert-pipeline pretrain --tokenizer "$runs/tokenizers/unigram-seg-32k" \
        --corpus "$runs/corpus/train.arabertv2.txt" -o "$runs/pretrain/mini-seg32k-$1" --objective "$1" \
        --model-size mini --max-seq-length 256 --whole-word-masking --steps "$2" --batch-size 32 --grad-accum 1 \
        --lr "$3" --warmup "$4" --seed 0 --save-every 50 --eval-every 100 --log-every 10 --no-progress "${@:5}"
}
finetune() {  # objective
    arabert-pipeline finetune --model "$runs/pretrain/mini-seg32k-$1" --protocol offline \
        -o "$runs/qa/mini-seg32k-$1" --max-seq-length 256 --doc-stride 128 --epochs 2 --lr 3e-4 --batch-size 32 \
        --skip-misaligned --drop-leaking-train --seed 0 --no-progress
}
# Interrupted? Rerun the script: a finished stage is skipped, an interrupted pretraining resumes from its checkpoint.
resume_flag() { [ -d "$runs/pretrain/mini-seg32k-$1/checkpoints" ] && echo --resume || true; }
for objective in mlm electra; do
    if [ "$objective" = mlm ]; then settings="${MLM_STEPS:-1550} 8e-4 0.06"; else settings="${ELECTRA_STEPS:-1350} 3e-4 0.1"; fi
    if [ ! -f "$runs/pretrain/mini-seg32k-$objective/model.safetensors" ]; then
        pretrain "$objective" $settings $(resume_flag "$objective") &
    fi
done
wait
for objective in mlm electra; do
    [ -f "$runs/qa/mini-seg32k-$objective/model.safetensors" ] || finetune "$objective" &
done
wait
arabert-pipeline evaluate --model "$runs/qa/mini-seg32k-electra" --model "$runs/qa/mini-seg32k-mlm" \
    --label arabert-mini-electra --label arabert-mini-mlm --data arcd-test --data tydiqa-goldp-ar-dev \
    --pretraining-log "electra=$runs/pretrain/mini-seg32k-electra/log.jsonl" \
    --pretraining-log "mlm=$runs/pretrain/mini-seg32k-mlm/log.jsonl" -o "$runs/eval/objectives"
