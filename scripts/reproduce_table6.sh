#!/usr/bin/env bash
# The AraBERT-vs-mBERT comparison (the paper's Table 6) at small scale: three L4/H256 MLM models with the same
# architecture, objective and CPU budget, differing only in preprocessing + tokenizer:
#   seg-unigram   AraBERTv1-style: Farasa-segmented text (arabertv2), SentencePiece unigram 32k
#   noseg-unigram AraBERTv0.1-style: normalized unsegmented text (arabertv02), SentencePiece unigram 32k
#   mbert-vocab   mBERT's cased WordPiece vocabulary (119,547 entries) on raw text (preprocessing none)
# Each is fine-tuned with the `offline` QA protocol and all three are evaluated side by side with the shipped model
# (paired tests against the first model); docs/experiments/table6.md's table is this report. "Same compute" means the same
# wall-clock budget on an equal share of the machine (--time-budget, the three runs in parallel, one thread each): a
# bigger vocabulary or more tokens per word costs steps, as it would in the paper's setting.
# Usage: ARABERT_PIPELINE_DATA=../shared/data bash scripts/reproduce_table6.sh [RUNS_DIR]
# The report goes to $REPORT (default notebooks/results/table6, the committed one; rerun the notebook after).
# BUDGET_MIN (default 75, what the runs in docs/experiments/table6.md used) = pretraining minutes per model. Rerun the script after an
# interruption: finished stages are skipped and an interrupted pretraining resumes from its last checkpoint.
set -euo pipefail
: "${ARABERT_PIPELINE_DATA:?point ARABERT_PIPELINE_DATA at the data root (corpus/, qa/, vocab/)}"
runs=${1:-runs}
budget=${BUDGET_MIN:-75}
corpus=$ARABERT_PIPELINE_DATA/corpus
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
shards=$(ls "$corpus"/*.txt.xz | sort | grep -v ant-multisource-006)  # 006 is held out (tokenizer report)
models="seg-unigram noseg-unigram mbert-vocab"

# `wait` alone forgets a failed background job (e.g. one stopped by the OOM killer): wait for each and stop on failure.
wait_all() {  # stage name, then the PIDs
    local stage=$1 pid; shift
    for pid in "$@"; do
        wait "$pid" || { echo "a $stage run failed: see $runs/$stage-*.log; rerun this script to resume" >&2; exit 1; }
    done
}
preprocessing_of() { case $1 in seg-unigram) echo arabertv2 ;; noseg-unigram) echo arabertv02 ;; *) echo none ;; esac; }

for model in $models; do
    config=$(preprocessing_of "$model")
    text=$runs/corpus/train.$config.txt
    [ -f "$text" ] || arabert-pipeline preprocess $shards -o "$text" --preprocessing "$config" --workers 2 --no-progress
    tokenizer=$runs/tokenizers/$model
    if [ ! -f "$tokenizer/tokenizer.json" ]; then
        if [ "$model" = mbert-vocab ]; then
            arabert-pipeline train-tokenizer --from-vocab "$ARABERT_PIPELINE_DATA/vocab/mbert-cased-vocab.txt" \
                --preprocessing none -o "$tokenizer"
        else
            arabert-pipeline train-tokenizer "$text" -o "$tokenizer" --model-type unigram --vocab-size 32000 \
                --no-progress
        fi
    fi
done

pids=()
for model in $models; do
    out=$runs/pretrain/mini-$model
    [ -f "$out/model.safetensors" ] && continue
    resume=(); [ -d "$out/checkpoints" ] && resume=(--resume)
    arabert-pipeline pretrain --tokenizer "$runs/tokenizers/$model" \
        --corpus "$runs/corpus/train.$(preprocessing_of "$model").txt" -o "$out" --objective mlm --model-size mini \
        --max-seq-length 256 --whole-word-masking --time-budget "$budget" --batch-size 32 --lr 8e-4 --warmup 0.06 \
        --seed 0 --save-every 50 --eval-every 200 --log-every 10 --no-progress "${resume[@]}" \
        > "$runs/pretrain-$model.log" 2>&1 &
    pids+=($!)
done
wait_all pretrain "${pids[@]}"

pids=()
for model in $models; do
    [ -f "$runs/qa/mini-$model/model.safetensors" ] && continue
    arabert-pipeline finetune --model "$runs/pretrain/mini-$model" --protocol offline -o "$runs/qa/mini-$model" \
        --max-seq-length 256 --doc-stride 128 --epochs 2 --lr 3e-4 --batch-size 32 --skip-misaligned \
        --drop-leaking-train --seed 0 --no-progress > "$runs/finetune-$model.log" 2>&1 &
    pids+=($!)
done
wait_all finetune "${pids[@]}"

arabert-pipeline evaluate --model "$runs/qa/mini-seg-unigram" --model "$runs/qa/mini-noseg-unigram" \
    --model "$runs/qa/mini-mbert-vocab" --model arabert_pipeline/models/arabert-mini \
    --label arabertv1-style --label arabertv0.1-style --label mbert-vocab --label arabert-mini \
    --data arcd-test --data tydiqa-goldp-ar-dev \
    --pretraining-log "arabertv1-style=$runs/pretrain/mini-seg-unigram/log.jsonl" \
    --pretraining-log "arabertv0.1-style=$runs/pretrain/mini-noseg-unigram/log.jsonl" \
    --pretraining-log "mbert-vocab=$runs/pretrain/mini-mbert-vocab/log.jsonl" -o "${REPORT:-notebooks/results/table6}" --overwrite
