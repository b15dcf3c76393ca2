#!/usr/bin/env bash
# Reproduces the shipped default QA model (arabert_pipeline/models/arabert-mini) from scratch with this package's own
# stages: preprocess → train-tokenizer → pretrain (MLM) → finetune (recipe chosen on dev) → evaluate → ship.
# Usage: ARABERT_PIPELINE_DATA=../shared/data bash scripts/train_default_model.sh [RUNS_DIR]
# The test report goes to $REPORT (default notebooks/results/default-model, the committed one); COMPARE="LABEL=DIR
# ..." adds other models to it (the committed report compares the previous defaults).
# The same script runs on a CPU or a GPU (pretrain and finetune use CUDA when torch sees it). The shipped model was
# pretrained on one H100 (1.5 min) and fine-tuned on a 2-core CPU; on the CPU alone, pretraining takes hours.
# Rerun after an interruption: finished stages are skipped, pretraining and fine-tuning resume from their checkpoints.
set -euo pipefail
: "${ARABERT_PIPELINE_DATA:?point ARABERT_PIPELINE_DATA at the data root (corpus/, qa/)}"
runs=${1:-runs}
corpus=$ARABERT_PIPELINE_DATA/corpus
ship=arabert_pipeline/models/arabert-mini
text=$runs/corpus/train.arabertv02.txt
tokenizer=$runs/tokenizers/noseg-unigram

resume_flag() { [ -d "$1/checkpoints" ] && echo --resume || true; }

# 1. Normalized, unsegmented corpus (AraBERTv0.2 preprocessing: the tokenization that won the small-scale Table 6);
#    ant-multisource-006 is held out (tokenizer report).
[ -f "$text" ] || arabert-pipeline preprocess $(ls "$corpus"/*.txt.xz | sort | grep -v ant-multisource-006) \
    -o "$text" --preprocessing arabertv02 --workers 2
# 2. SentencePiece unigram, 32k pieces.
[ -f "$tokenizer/tokenizer.json" ] || arabert-pipeline train-tokenizer "$text" -o "$tokenizer" --model-type unigram \
    --vocab-size 32000
# 3. MLM with whole-word masking, L4/H256, sequences of 256 (QA windows of 256 then read trained positions only),
#    batches of 256 sequences, lr 1e-3 with 6% warm-up and linear decay, no dropout while pretraining (underfitting,
#    not overfitting, is what limits a run this short). The shipped encoder ran `--time-budget 1.5` on one H100, which
#    came to 1,497 steps (90.6 M tokens, 3.6 passes over the corpus); --steps gives the same length anywhere (the
#    budgeted run's decay was re-planned a few times from its measured speed, so it is not one straight line).
pretrained=$runs/pretrain/mini-noseg-gpu
[ -f "$pretrained/model.safetensors" ] || arabert-pipeline pretrain --tokenizer "$tokenizer" --corpus "$text" \
    -o "$pretrained" --objective mlm --model-size mini --max-seq-length 256 --whole-word-masking \
    --steps "${PRETRAIN_STEPS:-1497}" --batch-size 256 --lr 1e-3 --warmup 0.06 --dropout 0 --seed 0 \
    --save-every 100 --eval-every 400 $(resume_flag "$pretrained")
# 4. QA fine-tuning with the recipe chosen on dev (scripts/qa_levers.sh): ARCD-train without the arcd-dev articles,
#    XQuAD-ar and AQAD (opt-in: answers located automatically, no licence stated), the question-overlap token type,
#    up to 4 epochs at lr 3e-4; the best epoch, the decoding settings (sentence-prior weight, answers inside one
#    sentence, expected-F1 decoding) and the no-answer threshold chosen on arcd-dev + MLQA-ar dev.
#    ARCD-test and TyDiQA-GoldP-ar dev are only kept out of training (--hold-out), never scored here.
qa=$runs/qa/mini-noseg
[ -f "$qa/model.safetensors" ] || arabert-pipeline finetune --model "$pretrained" -o "$qa" \
    --train arcd-train-rest xquad-ar aqad --dev arcd-dev mlqa-ar-dev --hold-out arcd-test tydiqa-goldp-ar-dev \
    --question-overlap --epochs 4 --patience 1 --lr 3e-4 --batch-size 32 --max-seq-length 256 --doc-stride 128 \
    --skip-misaligned --drop-leaking-train --seed 0 $(resume_flag "$qa")
# 4b. The null answer ("no answer in this context"): 2 more epochs at lr 1e-4 on ARCD-train-rest + XQuAD-ar, each
#     question also paired with another paragraph of its article, labelled no-answer. Dev F1 of answers stayed level
#     (README), and the no-answer threshold is chosen on dev negatives built the same way.
qa_null=$runs/qa/mini-noseg-negatives
[ -f "$qa_null/model.safetensors" ] || arabert-pipeline finetune --model "$qa" -o "$qa_null" \
    --train arcd-train-rest xquad-ar --negatives --dev arcd-dev mlqa-ar-dev --hold-out arcd-test tydiqa-goldp-ar-dev \
    --question-overlap --epochs 2 --patience 1 --lr 1e-4 --batch-size 32 --max-seq-length 256 --doc-stride 128 \
    --skip-misaligned --drop-leaking-train --seed 0 $(resume_flag "$qa_null")
# 5. Side-by-side report on the test sets with the lexical baselines (and the models named in $COMPARE).
compare=()
for pair in ${COMPARE:-}; do compare+=(--model "${pair#*=}" --label "${pair%%=*}"); done
arabert-pipeline evaluate --model "$qa_null" --label "arabert-mini (shipped)" "${compare[@]}" \
    --data arcd-test --data tydiqa-goldp-ar-dev --no-answer -o "${REPORT:-notebooks/results/default-model}" --overwrite
# 6. Ship: the Hugging Face files and the prior's IDF table (no checkpoints), weights in fp16, then the ONNX graph.
python scripts/ship_model.py "$qa_null" "$ship"
arabert-pipeline export-onnx "$ship"
echo "shipped to $ship; update its README.md (model card) from ${REPORT:-notebooks/results/default-model}/table.md"
