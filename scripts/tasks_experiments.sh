#!/usr/bin/env bash
# AraBERT's other tasks (issue 40) from the shipped mini encoder: sentiment and sarcasm on ArSarcasm-v2, named entities
# on ANERcorp (the AraBERT authors' split). Per experiment: fine-tune (resumable; the epoch kept is the best on dev),
# export the int8 form the package ships, check it against the fp32 model on dev, then ONE evaluate run that scores
# the models and the baselines (fitted on train, their settings chosen on dev) on dev and on test, with bootstrap CIs
# and paired differences against the shipped model. The test set is read once per model: a results folder that
# exists is never rewritten (delete it to rerun). No choice is made after the test set is read.
#
# Usage: ARABERT_PIPELINE_DATA=../shared/data bash scripts/tasks_experiments.sh [RUNS_DIR] [EXPERIMENT...]
#   EXPERIMENT: sentiment, sentiment-lexical, ner, sarcasm (default: these four, in that order), sentiment-lr5e-5. Rerun after an interruption: finished
#   steps are skipped, an interrupted fine-tuning resumes from its last checkpoint (saved every epoch).
# Writes notebooks/results/<experiment>/ (dev-int8-check/ and the dev+test report: table.md, results.json,
# predictions/, finetuning.json), arabert_pipeline/models/arabert-sentiment/ (the shipped model, int8 ONNX + tokenizer;
# its README.md model card is written by hand and kept by --overwrite) and RUNS_DIR/ner-mini-lr2e-4-int8 (the NER
# model shipped before the larger encoder's, scripts/tasks_larger_encoder.sh).
# Cost on a 2-core CPU: sentiment ~35 min of fine-tuning, NER ~30 min, sarcasm ~35 min; each evaluation 5-15 min.
set -euo pipefail
: "${ARABERT_PIPELINE_DATA:?point ARABERT_PIPELINE_DATA at the data root (tasks/)}"
runs=${1:-runs/tasks}
shift || true
experiments=("$@")
[ ${#experiments[@]} -gt 0 ] || experiments=(sentiment sentiment-lexical ner sarcasm)
results=notebooks/results
mkdir -p "$runs"
# The encoder: the shipped arabert-mini whose weights came in commit ac94850 (DeBERTa-v2 L4/H256, 80 CPU-minutes of
# pretraining), taken from git at bfc25df (the last commit of that model: the same weights, and the reader/ whose
# word2vec table the NER BiLSTM baseline reads), so that a later default model does not change these experiments.
# ENCODER=DIR fine-tunes another one.
encoder=${ENCODER:-$runs/arabert-mini-bfc25df}
if [ ! -f "$encoder/model.safetensors" ]; then
    mkdir -p "$encoder"
    git archive bfc25df arabert_pipeline/models/arabert-mini | tar -x -C "$encoder" --strip-components=3
fi

resume_flag() { [ -d "$1/checkpoints" ] && echo --resume || true; }

classifier() {  # RUN LABEL_COLUMN DEV_METRIC [FLAGS...]: fine-tune on ArSarcasm-v2 (90% of train), epoch chosen on the
               # dev 10%
    [ -f "$runs/$1/model.safetensors" ] && return
    arabert-pipeline finetune --task classification --model "$encoder" -o "$runs/$1" \
        --train arsarcasm-v2-train-rest --dev arsarcasm-v2-dev --hold-out arsarcasm-v2-test --label-column "$2" \
        --dev-metric "$3" --class-weights --drop-leaking-train --epochs 5 --lr 2e-4 --batch-size 32 --seed 42 \
        --no-progress $(resume_flag "$runs/$1") "${@:4}"
}

tagger() {  # RUN: fine-tune on ANERcorp train, epoch chosen on dev micro-F1
    [ -f "$runs/$1/model.safetensors" ] && return
    arabert-pipeline finetune --task ner --model "$encoder" -o "$runs/$1" \
        --train anercorp-train --dev anercorp-dev --hold-out anercorp-test --drop-leaking-train \
        --epochs 8 --lr 2e-4 --batch-size 32 --seed 42 --no-progress $(resume_flag "$runs/$1")
}

ship() {  # RUN TARGET: the run's model.onnx (fp32, reading model.safetensors) and the int8 copy in TARGET
    [ -f "$2/model.onnx" ] && [ "$2/model.onnx" -nt "$runs/$1/model.safetensors" ] && return
    arabert-pipeline export-onnx "$runs/$1" --standalone "$2" --overwrite
}

report() {  # EXPERIMENT TASK RUN SHIPPED DEV TEST TRAIN [FLAGS...]: the int8 check on dev, then dev + test once
    local out=$results/$1 task=$2 run=$runs/$3 shipped=$4 dev=$5 test=$6 train=$7
    mkdir -p "$out"
    [ -f "$out/dev-int8-check/results.json" ] || arabert-pipeline evaluate --task "$task" \
        --model "$shipped" --label "$1 int8 (shipped)" --model "$run" --label "$1 fp32" \
        --data "$dev" --baselines none -o "$out/dev-int8-check" "${@:8}" > /dev/null
    [ -f "$out/report/results.json" ] || arabert-pipeline evaluate --task "$task" \
        --model "$shipped" --label "$1 int8 (shipped)" --model "$run" --label "$1 fp32" \
        --data "$dev" --data "$test" --train "$train" --dev "$dev" -o "$out/report" "${@:8}" > /dev/null
    python - "$run/arabert_pipeline.json" "$out/finetuning.json" <<'EOF'
import json, sys
run = json.load(open(sys.argv[1], encoding="utf-8"))["finetune"]
keys = ("train", "dev", "train_examples", "epochs", "lr", "batch_size", "seed", "dev_metric", "dev_scores", "epoch",
        "steps", "seconds", "rows_per_second", "tokens_per_second", "peak_rss_gib")
open(sys.argv[2], "w", encoding="utf-8").write(json.dumps({k: run.get(k) for k in keys}, indent=1) + "\n")
EOF
    cat "$out/report/table.md"
}

for experiment in "${experiments[@]}"; do
    case $experiment in
    sentiment)
        classifier sentiment-mini-lr2e-4-cw sentiment f1_pn
        ship sentiment-mini-lr2e-4-cw arabert_pipeline/models/arabert-sentiment
        report sentiment classification sentiment-mini-lr2e-4-cw arabert_pipeline/models/arabert-sentiment \
            arsarcasm-v2-dev arsarcasm-v2-test arsarcasm-v2-train-rest --label-column sentiment ;;
    ner)
        tagger ner-mini-lr2e-4
        # Shipped as arabert-ner until the 4-bit L6 model replaced it (scripts/tasks_larger_encoder.sh).
        ship ner-mini-lr2e-4 "$runs/ner-mini-lr2e-4-int8"
        report ner ner ner-mini-lr2e-4 "$runs/ner-mini-lr2e-4-int8" anercorp-dev anercorp-test anercorp-train \
            --vectors "$encoder" ;;
    sarcasm)  # not shipped: its int8 copy stays in RUNS_DIR; sentiment's dev peaked at epoch 1, so stop after one
              # epoch without progress
        classifier sarcasm-mini-lr2e-4-cw sarcasm f1:TRUE --patience 1
        ship sarcasm-mini-lr2e-4-cw "$runs/sarcasm-mini-lr2e-4-cw-int8"
        report sarcasm classification sarcasm-mini-lr2e-4-cw "$runs/sarcasm-mini-lr2e-4-cw-int8" \
            arsarcasm-v2-dev arsarcasm-v2-test arsarcasm-v2-train-rest --label-column sarcasm --metric f1:TRUE ;;
    sentiment-lexical)  # after sentiment: the shipped int8 model with a TF-IDF companion (add-lexical: C and the
                        # weight chosen on dev), scored on dev + test once, then its lexical/ and weight shipped
        shipped=arabert_pipeline/models/arabert-sentiment
        with_lexical=$runs/sentiment-mini-int8-lexical
        [ -f "$with_lexical/lexical/weights.npz" ] || arabert-pipeline add-lexical "$shipped" \
            --train arsarcasm-v2-train-rest --dev arsarcasm-v2-dev --hold-out arsarcasm-v2-test \
            --label-column sentiment -o "$with_lexical"
        out=$results/sentiment-lexical
        mkdir -p "$out"
        [ -f "$out/report/results.json" ] || arabert-pipeline evaluate --task classification \
            --model "$with_lexical" --label "sentiment + lexical (int8)" \
            --model "$shipped" --label "sentiment alone (int8, shipped before)" \
            --data arsarcasm-v2-dev --data arsarcasm-v2-test --train arsarcasm-v2-train-rest --dev arsarcasm-v2-dev \
            --label-column sentiment -o "$out/report" > /dev/null
        rm -rf "$shipped/lexical"
        cp -r "$with_lexical/lexical" "$with_lexical/arabert_pipeline.json" "$shipped/" ;;
    sentiment-lr5e-5)  # dev only: a quarter of the learning rate, 3 epochs (the 2e-4 run's dev peaked at epoch 1),
                       # int8, its own lexical companion; against the shipped model on dev (test read only if it wins)
        classifier sentiment-mini-lr5e-5-cw sentiment f1_pn --lr 5e-5 --epochs 3
        ship sentiment-mini-lr5e-5-cw "$runs/sentiment-lr5e-5-int8"
        [ -f "$runs/sentiment-lr5e-5-int8-lexical/lexical/weights.npz" ] || arabert-pipeline add-lexical \
            "$runs/sentiment-lr5e-5-int8" --train arsarcasm-v2-train-rest --dev arsarcasm-v2-dev \
            --hold-out arsarcasm-v2-test --label-column sentiment -o "$runs/sentiment-lr5e-5-int8-lexical"
        out=$results/sentiment-lr5e-5-dev
        mkdir -p "$out"
        [ -f "$out/results.json" ] || arabert-pipeline evaluate --task classification \
            --model "$runs/sentiment-lr5e-5-int8-lexical" --label "lr 5e-5 + lexical (int8)" \
            --model arabert_pipeline/models/arabert-sentiment --label "shipped (lr 2e-4 + lexical, int8)" \
            --model "$runs/sentiment-lr5e-5-int8" --label "lr 5e-5 alone (int8)" --data arsarcasm-v2-dev \
            --train arsarcasm-v2-train-rest --dev arsarcasm-v2-dev --label-column sentiment -o "$out" > /dev/null ;;
    *) echo "unknown experiment $experiment: sentiment, sentiment-lexical, sentiment-lr5e-5, ner or sarcasm" >&2
       exit 2 ;;
    esac
done
