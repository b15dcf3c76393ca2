#!/usr/bin/env bash
# Issue 40's side-by-side, at equal compute: sentiment (ArSarcasm-v2) and NER (ANERcorp) fine-tuned from the three
# encoders of the Table 6 comparison (scripts/reproduce_table6.sh: DeBERTa-v2 + EMD L4/H256, each pretrained 60
# core-minutes on the same corpus, differing only in preprocessing + tokenizer):
#   arabertv1-style    Farasa-segmented text, SentencePiece unigram 32k       RUNS/pretrain/t6-seg-unigram
#   arabertv0.1-style  normalized unsegmented text, SentencePiece unigram 32k RUNS/pretrain/t6-noseg-unigram
#   mbert-vocab        raw text, mBERT's cased WordPiece vocabulary (119,547) RUNS/pretrain/t6-mbert-vocab
# Each with the mini task recipe of scripts/tasks_experiments.sh (lr 2e-4, batch 32, seed 42; sentiment 5 epochs with
# class weights, NER 8 epochs; the epoch kept is the best on dev), then ONE evaluate run per task over dev and test with
# the three models and the baselines, paired against the arabertv0.1-style model (AraBERT's row in the paper's task
# tables). Settings are fixed before any run; the test sets are read once (a results folder that exists is not
# rewritten).
#
# Usage: ARABERT_PIPELINE_DATA=../shared/data bash scripts/tasks_vocabularies.sh T6_RUNS_DIR [RUNS_DIR]
#   T6_RUNS_DIR: reproduce_table6.sh's RUNS_DIR (its pretrain/ is read). Rerun after a kill: finished fine-tunings are
#   skipped, an interrupted one resumes from its last checkpoint.
# Writes notebooks/results/tasks-vocabularies/{sentiment,ner}/. Cost on a 2-core CPU: ~20 min per fine-tuning (six),
# ~10 min per report.
set -euo pipefail
: "${ARABERT_PIPELINE_DATA:?point ARABERT_PIPELINE_DATA at the data root (tasks/)}"
t6=${1:?the Table 6 runs dir}
runs=${2:-runs/tasks}
systems=(noseg-unigram seg-unigram mbert-vocab)
label_of() {
    case $1 in seg-unigram) echo arabertv1-style ;; noseg-unigram) echo arabertv0.1-style ;; *) echo "$1" ;; esac
}
resume_flag() { [ -d "$1/checkpoints" ] && echo --resume || true; }
results=notebooks/results/tasks-vocabularies
sentiment_models=() ner_models=()
for system in "${systems[@]}"; do
    encoder=$t6/pretrain/t6-$system
    run=$runs/t6-$system-sentiment
    [ -f "$run/model.safetensors" ] || arabert-pipeline finetune --task classification --model "$encoder" -o "$run" \
        --train arsarcasm-v2-train-rest --dev arsarcasm-v2-dev --hold-out arsarcasm-v2-test --label-column sentiment \
        --dev-metric f1_pn --class-weights --drop-leaking-train --epochs 5 --lr 2e-4 --batch-size 32 --seed 42 \
        --no-progress $(resume_flag "$run")
    sentiment_models+=(--model "$run" --label "$(label_of "$system")")
    run=$runs/t6-$system-ner
    [ -f "$run/model.safetensors" ] || arabert-pipeline finetune --task ner --model "$encoder" -o "$run" \
        --train anercorp-train --dev anercorp-dev --hold-out anercorp-test --drop-leaking-train --epochs 8 --lr 2e-4 \
        --batch-size 32 --seed 42 --no-progress $(resume_flag "$run")
    ner_models+=(--model "$run" --label "$(label_of "$system")")
done
mkdir -p "$results"
[ -f "$results/sentiment/results.json" ] || arabert-pipeline evaluate --task classification "${sentiment_models[@]}" \
    --data arsarcasm-v2-dev --data arsarcasm-v2-test --train arsarcasm-v2-train-rest --dev arsarcasm-v2-dev \
    --label-column sentiment -o "$results/sentiment"
[ -f "$results/ner/results.json" ] || arabert-pipeline evaluate --task ner "${ner_models[@]}" \
    --data anercorp-dev --data anercorp-test --train anercorp-train --dev anercorp-dev -o "$results/ner"
