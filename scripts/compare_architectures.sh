#!/usr/bin/env bash
# BERT-MLM vs DeBERTa-MLM vs DeBERTaV3 (replaced-token detection + GDES), and SpanBERT (span masking, ± SBO) and
# XLNet-PLM, at equal CPU budget: L4/H256 models on
# the same normalized corpus and unigram tokenizer as the shipped model, pretrained one after the other for the same
# wall-clock minutes on the same machine, each fine-tuned with the same QA recipe, then side-by-side reports with
# the pretraining logs (held-out MLM / RTD metrics) and paired tests: first on the dev sets the recipe chooses on,
# then on ARCD-test and TyDiQA-GoldP-ar dev.
# Usage: ARABERT_PIPELINE_DATA=../shared/data bash scripts/compare_architectures.sh [RUNS_DIR]
# The committed report: pretraining with PRETRAIN_MINUTES=20 THREADS=1 (one core each, while the other core served
# light work), then the script re-run with THREADS=2 for fine-tuning and evaluation (equal for the three).
# PRETRAIN_MINUTES (default 90) is each run's wall-clock budget (it re-plans its learning-rate schedule to end on
# time); THREADS (default 2) the threads every job uses; QA_FLAGS the fine-tuning recipe (default below: the shipped
# model's recipe without AQAD, whose licence is unknown and which costs 6x the fine-tuning time); REPORT the
# report directory (default notebooks/results/architectures; dev/ and test/ inside); EVAL_FLAGS extra evaluate
# flags (e.g. "--limit 20 --resamples 100" for a smoke run). Rerun after an interruption:
# finished stages are skipped, an interrupted pretraining or fine-tuning resumes from its last checkpoint (a
# pretraining budget counts the time already spent).
set -euo pipefail
: "${ARABERT_PIPELINE_DATA:?point ARABERT_PIPELINE_DATA at the data root (corpus/, qa/)}"
runs=${1:-runs}
pretrain_minutes=${PRETRAIN_MINUTES:-90}
threads=${THREADS:-2}
qa_flags=${QA_FLAGS:---train arcd-train-rest xquad-ar --dev arcd-dev mlqa-ar-dev --hold-out arcd-test \
tydiqa-goldp-ar-dev --question-overlap --epochs 4 --patience 1 --lr 3e-4 --max-seq-length 256 --doc-stride 128 \
--skip-misaligned --drop-leaking-train}
report=${REPORT:-notebooks/results/architectures}
eval_flags=${EVAL_FLAGS:-}
corpus=$ARABERT_PIPELINE_DATA/corpus
text=$runs/corpus/train.arabertv02.txt
tokenizer=${TOKENIZER:-arabert_pipeline/models/arabert-mini}  # the shipped model's unigram-32k tokenizer
export OMP_NUM_THREADS=$threads MKL_NUM_THREADS=$threads

[ -f "$text" ] || arabert-pipeline preprocess $(ls "$corpus"/*.txt.xz | sort | grep -v ant-multisource-006) \
    -o "$text" --preprocessing arabertv02 --workers 2

resume_flag() { [ -d "$1/checkpoints" ] && echo --resume || true; }
pretrain() {  # name objective flags...
    local out=$runs/pretrain/arch-$1
    [ -f "$out/model.safetensors" ] && return
    arabert-pipeline pretrain --tokenizer "$tokenizer" --corpus "$text" -o "$out" --objective "$2" \
        --model-size mini --max-seq-length 256 --batch-size 32 --dropout 0 \
        --time-budget "$pretrain_minutes" --seed 0 --save-every 50 --eval-every 100 --log-every 10 --no-progress \
        $(resume_flag "$out") "${@:3}"
}
# MLM at the shipped model's settings (lr 8e-4, 6% warm-up); DeBERTa with its enhanced mask decoder, as the paper
# pretrains it. DeBERTaV3 as its paper: a generator of the discriminator's width and half its depth (with EMD),
# gradient-disentangled embedding sharing, λ = 50, at ELECTRA-Small's lr 5e-4 and 10% warm-up.
# The seeds' other objectives (issue 28) at the same budget: SpanBERT's span masking without and with its span boundary
# objective (BERT, otherwise as bert-mlm), and XLNet's permutation LM (partial prediction K = 6, its own span-aware
# target sampling, so no --whole-word-masking).
# NAMES picks the systems (default: all); the first is the reference of the pooled tables.
names=(${NAMES:-bert-mlm deberta-mlm deberta-v3 bert-span bert-span-sbo xlnet-plm})
for name in "${names[@]}"; do
    case $name in
        bert-mlm) pretrain bert-mlm mlm --architecture bert --whole-word-masking --lr 8e-4 --warmup 0.06 ;;
        deberta-mlm) pretrain deberta-mlm mlm --architecture deberta-v2 --enhanced-mask-decoder --whole-word-masking \
            --lr 8e-4 --warmup 0.06 ;;
        deberta-v3) pretrain deberta-v3 electra --architecture deberta-v2 --enhanced-mask-decoder --whole-word-masking \
            --electra-embedding-sharing gdes --electra-generator-size 1 --electra-generator-layers 0.5 --lr 5e-4 \
            --warmup 0.1 ;;
        bert-span) pretrain bert-span mlm --architecture bert --masking span --lr 8e-4 --warmup 0.06 ;;
        bert-span-sbo) pretrain bert-span-sbo mlm --architecture bert --masking span --span-boundary-objective \
            --lr 8e-4 --warmup 0.06 ;;
        xlnet-plm) pretrain xlnet-plm plm --architecture xlnet --lr 8e-4 --warmup 0.06 ;;
        *) echo "unknown system $name" >&2; exit 2 ;;
    esac
done

for name in "${names[@]}"; do
    out=$runs/qa/arch-$name
    [ -f "$out/model.safetensors" ] && continue
    flags=$qa_flags
    # XLNet reads token types as segments: a third type (question overlap) would split the context in two.
    [ "$name" = xlnet-plm ] && flags=${flags//--question-overlap/}
    # shellcheck disable=SC2086  # QA_FLAGS is a list of flags
    arabert-pipeline finetune --model "$runs/pretrain/arch-$name" -o "$out" $flags --batch-size 32 --seed 0 \
        --no-progress $(resume_flag "$out")
done
# The shipped model's decoder: answers inside one sentence, expected-F1 decoding, the sentence-prior weight chosen on
# the dev sets for each model.
for name in "${names[@]}"; do
    out=$runs/qa/arch-$name-decoded
    [ -f "$out/arabert_pipeline.json" ] || arabert-pipeline tune-decoding "$runs/qa/arch-$name" \
        --dev arcd-dev mlqa-ar-dev -o "$out" --within-sentence on --decoding expected-f1 | tail -1
done
models=() labels=() logs=()
for name in "${names[@]}"; do
    models+=(--model "$runs/qa/arch-$name-decoded") labels+=(--label "$name")
    logs+=(--pretraining-log "$name=$runs/pretrain/arch-$name/log.jsonl")
done
mkdir -p "$report"
# shellcheck disable=SC2086
arabert-pipeline evaluate "${models[@]}" "${labels[@]}" --data arcd-dev --data mlqa-ar-dev "${logs[@]}" \
    -o "$report/dev" --overwrite $eval_flags
# shellcheck disable=SC2086
arabert-pipeline evaluate "${models[@]}" "${labels[@]}" --data arcd-test --data tydiqa-goldp-ar-dev "${logs[@]}" \
    -o "$report/test" --overwrite $eval_flags

# Pooled over the two dev sets (652 questions), then over the two test sets: each architecture against BERT-MLM and
# against the TF-IDF sentence picker, with F1 inside the right sentence; written beside the reports as pooled.md.
for split in dev test; do
    python scripts/pooled_table.py "$report/$split" "${names[@]}" > "$report/$split/pooled.md"
done
