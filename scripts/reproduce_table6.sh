#!/usr/bin/env bash
# The AraBERT-vs-mBERT comparison (the paper's Table 6) at small scale and equal compute (issue 29): five encoders that
# differ only in preprocessing + tokenizer, everything else the shipped default's recipe:
#   arabertv1-style    seg-unigram      Farasa-segmented text (arabertv2), SentencePiece unigram 32k
#   arabertv0.1-style  noseg-unigram    normalized unsegmented text (arabertv02), SentencePiece unigram 32k
#   arabertv0.2-style  noseg-wordpiece  normalized unsegmented text (arabertv02), WordPiece 32k
#   arabertv2-style    seg-wordpiece    Farasa-segmented text (arabertv2), WordPiece 32k
#   mbert-vocab        mbert-vocab      mBERT's cased WordPiece vocabulary (119,547 entries) on raw text (offline
#                                       stand-in for bert-base-multilingual-cased, same architecture and compute)
# Each: DeBERTa-v2 + EMD L4/H256, whole-word MLM, sequences of 256, pretrained one after the other for BUDGET_MIN
# wall-clock minutes on THREADS threads (core-minutes = BUDGET_MIN × THREADS; the logs give tokens), then fine-tuned
# with the shipped model's recipe (without its negatives step) once per seed in SEEDS, the decoder chosen on dev per
# model (tune-decoding: sentence prior and temperature, answers inside one sentence, expected-F1 decoding). Reports:
# $REPORT/dev (the choice of each decoder is already made; this shows the dev picture) and $REPORT/test (ARCD-test +
# TyDiQA-GoldP-ar dev, read once), each with pooled.md (pooled, paired against arabertv1-style) and seeds.md (the seed
# spread next to the bootstrap CIs); $REPORT/test/tokenization.md (per tokenizer: tokens per word, questions fitting
# one window, answers exact in tokens, answers starting inside a word); $REPORT/tokenizers.md (the tokenizers on held-out
# corpus text: tokens per word, words split, [UNK], vocabulary used).
# Usage: ARABERT_PIPELINE_DATA=../shared/data bash scripts/reproduce_table6.sh [RUNS_DIR]
# BUDGET_MIN (default 30) and THREADS (default 2): pretraining per model; SEEDS (default "0 1"); SYSTEMS (default all
# five; SYSTEMS="" none); VOCAB_SIZE (default 32000); QA_FLAGS the fine-tuning data and recipe (the small models');
# READER="LABEL=PREDICTIONS_DEV.json,PREDICTIONS_TEST.json" adds the
# static-embedding reader's rows. Rerun after an interruption: finished stages are skipped, an interrupted
# pretraining or fine-tuning resumes from its last checkpoint (a budget counts the minutes already spent).
# The published checkpoints (mBERT, AraBERT v0.1 / v1 / v0.2 / v2) with the paper's own recipe: scripts/paper_table6.sh.
set -euo pipefail
: "${ARABERT_PIPELINE_DATA:?point ARABERT_PIPELINE_DATA at the data root (corpus/, qa/, vocab/)}"
runs=${1:-runs}
budget=${BUDGET_MIN:-30}
vocab_size=${VOCAB_SIZE:-32000}
threads=${THREADS:-2}
seeds=(${SEEDS:-0 1})
systems=(${SYSTEMS-seg-unigram noseg-unigram noseg-wordpiece seg-wordpiece mbert-vocab})
qa_flags=${QA_FLAGS:---train arcd-train-rest xquad-ar --dev arcd-dev mlqa-ar-dev --hold-out arcd-test \
tydiqa-goldp-ar-dev --question-overlap --epochs 4 --patience 1 --lr 3e-4 --max-seq-length 256 --doc-stride 128 \
--skip-misaligned --drop-leaking-train}
dev_sets=${DEV_SETS:-arcd-dev mlqa-ar-dev}
test_sets=${TEST_SETS:-arcd-test tydiqa-goldp-ar-dev}
report=${REPORT:-notebooks/results/table6}
corpus=$ARABERT_PIPELINE_DATA/corpus
shards=${SHARDS:-$(ls "$corpus"/*.txt.xz | sort | grep -v ant-multisource-006)}  # 006 is held out (tokenizer report)
export OMP_NUM_THREADS=$threads MKL_NUM_THREADS=$threads

preprocessing_of() { case $1 in seg-*) echo arabertv2 ;; noseg-*) echo arabertv02 ;; *) echo none ;; esac; }
label_of() {
    case $1 in seg-unigram) echo arabertv1-style ;; noseg-unigram) echo arabertv0.1-style ;;
        noseg-wordpiece) echo arabertv0.2-style ;; seg-wordpiece) echo arabertv2-style ;; *) echo "$1" ;; esac
}
resume_flag() { [ -d "$1/checkpoints" ] && echo --resume || true; }

for system in "${systems[@]}"; do
    config=$(preprocessing_of "$system")
    text=$runs/corpus/train.$config.txt
    # shellcheck disable=SC2086  # the shard list
    [ -f "$text" ] || arabert-pipeline preprocess $shards -o "$text" --preprocessing "$config" --workers 2 --no-progress
    tokenizer=$runs/tokenizers/$system
    [ -f "$tokenizer/tokenizer.json" ] && continue
    case $system in
        mbert-vocab) arabert-pipeline train-tokenizer --from-vocab "$ARABERT_PIPELINE_DATA/vocab/mbert-cased-vocab.txt" \
            --preprocessing none -o "$tokenizer" ;;
        *-unigram) arabert-pipeline train-tokenizer "$text" -o "$tokenizer" --model-type unigram \
            --vocab-size "$vocab_size" --no-progress ;;
        *-wordpiece) arabert-pipeline train-tokenizer "$text" -o "$tokenizer" --model-type wordpiece \
            --vocab-size "$vocab_size" --no-progress ;;
    esac
done

# One pretraining at a time: two on two cores run 5-20x slower each than one after the other.
for system in "${systems[@]}"; do
    out=$runs/pretrain/t6-$system
    [ -f "$out/model.safetensors" ] && continue
    arabert-pipeline pretrain --tokenizer "$runs/tokenizers/$system" \
        --corpus "$runs/corpus/train.$(preprocessing_of "$system").txt" -o "$out" --objective mlm \
        --architecture deberta-v2 --enhanced-mask-decoder --model-size mini --max-seq-length 256 --whole-word-masking \
        --time-budget "$budget" --batch-size 32 --lr 8e-4 --warmup 0.06 --dropout 0 --seed 0 --save-every 50 \
        --eval-every 200 --log-every 10 --no-progress $(resume_flag "$out")
done

models_dev=() models_test=() names=()
for system in "${systems[@]}"; do
    for seed in "${seeds[@]}"; do
        qa=$runs/qa/t6-$system-s$seed
        # shellcheck disable=SC2086  # QA_FLAGS is a list of flags
        [ -f "$qa/model.safetensors" ] || arabert-pipeline finetune --model "$runs/pretrain/t6-$system" -o "$qa" \
            $qa_flags --batch-size 32 --seed "$seed" --no-progress $(resume_flag "$qa")
        # shellcheck disable=SC2086
        [ -f "$qa-decoded/arabert_pipeline.json" ] || arabert-pipeline tune-decoding "$qa" --dev $dev_sets \
            -o "$qa-decoded" --within-sentence on --decoding expected-f1 | tail -1
        label="$(label_of "$system")-s$seed"
        names+=("$label")
        models_dev+=(--model "$qa-decoded" --label "$label")
    done
done
models_test=("${models_dev[@]}")
logs=()
for system in "${systems[@]}"; do
    logs+=(--pretraining-log "$(label_of "$system")-s${seeds[0]}=$runs/pretrain/t6-$system/log.jsonl")
done
if [ -n "${READER:-}" ]; then
    reader_label=${READER%%=*} reader_files=${READER#*=}
    models_dev+=(--predictions "${reader_files%%,*}" --label "$reader_label")
    models_test+=(--predictions "${reader_files#*,}" --label "$reader_label")
    names+=("$reader_label")
fi
data() { for name in "$@"; do echo --data "$name"; done; }
mkdir -p "$report"
# shellcheck disable=SC2046  # one --data flag per set
arabert-pipeline evaluate "${models_dev[@]}" $(data $dev_sets) "${logs[@]}" -o "$report/dev" --overwrite
# shellcheck disable=SC2046
arabert-pipeline evaluate "${models_test[@]}" $(data $test_sets) "${logs[@]}" -o "$report/test" --overwrite
for split in dev test; do
    python scripts/pooled_table.py "$report/$split" "${names[@]}" > "$report/$split/pooled.md"
    python scripts/seed_spread.py "$report/$split" > "$report/$split/seeds.md"
done
# What each tokenizer does to the test questions: tokens per word, questions in one window, answers exact in tokens.
window=$(grep -oE -- '--max-seq-length [0-9]+' <<< "$qa_flags" | awk '{print $2}' || true)
tokenizers=()
for system in "${systems[@]}"; do tokenizers+=(--tokenizer "$(label_of "$system")=$runs/tokenizers/$system"); done
# shellcheck disable=SC2086
python scripts/tokenization_profile.py "${tokenizers[@]}" --data $test_sets --max-seq-length "${window:-384}" \
    -o "$report/test/tokenization.md"
# The tokenizers on held-out corpus text (the shard no tokenizer was trained on): tokens per word, words split, [UNK],
# vocabulary used. Pretraining budgets tokens, so tokens per word says how many words each system read at equal compute.
specs=()
for system in "${systems[@]}"; do specs+=(--tokenizer "$runs/tokenizers/$system,name=$(label_of "$system")"); done
arabert-pipeline tokenizer-report "${specs[@]}" --max-lines 20000 -o "$report/tokenizers" --overwrite --no-progress
