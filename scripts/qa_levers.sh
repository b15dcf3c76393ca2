#!/usr/bin/env bash
# The answer-quality levers (issue 17), each measured on the DEV split only (arcd-dev: 15 ARCD-train articles;
# mlqa-ar-dev): one pretrained encoder fine-tuned with one lever changed at a time; every run scores the dev sets after
# each epoch (best epoch kept); then the decoding levers on the same weights. Nothing here reads arcd-test or
# TyDiQA-ar dev. Then one evaluate report on dev and a pooled table of paired differences against the previous recipe.
# The shipped default is r6 (scripts/train_default_model.sh repeats r3 then r6 from its own encoder).
# Usage: ARABERT_PIPELINE_DATA=../shared/data [CORPUS=runs/corpus/train.arabertv02.txt] \
#            bash scripts/qa_levers.sh ENCODER_DIR [RUNS_DIR]
# Rerun after an interruption: finished runs are skipped, an interrupted fine-tuning resumes from its checkpoint.
set -euo pipefail
: "${ARABERT_PIPELINE_DATA:?point ARABERT_PIPELINE_DATA at the data root (qa/)}"
encoder=${1:?the pretrained encoder (an MLM model dir)}
runs=${2:-runs}/qa-levers
mkdir -p "$runs"

resume_flag() { [ -d "$1/checkpoints" ] && echo --resume || true; }
finetune() {  # NAME FLAGS...: fine-tune the encoder on arcd-train-rest + xquad-ar (+ what FLAGS add), choose on dev
    local out=$runs/$1
    [ -f "$out/model.safetensors" ] && return
    arabert-pipeline finetune --model "$encoder" -o "$out" --dev arcd-dev mlqa-ar-dev \
        --hold-out arcd-test tydiqa-goldp-ar-dev --max-seq-length 256 --doc-stride 128 --batch-size 32 --lr 3e-4 --skip-misaligned --drop-leaking-train --seed 0 --no-progress \
        $(resume_flag "$out") "${@:2}" 2>&1 | tee "$runs/$1.log"
}

# 0. The shipped model's recipe: 2 epochs at lr 3e-4.
finetune r0-2ep --epochs 2 --train arcd-train-rest xquad-ar
# 1. Small-data recipe: up to 8 epochs, best epoch on dev, early stop after 2 epochs without progress.
finetune r1-8ep --epochs 8 --patience 2 --train arcd-train-rest xquad-ar
# 2. + the question-overlap token type.
finetune r2-overlap --epochs 8 --patience 2 --question-overlap --train arcd-train-rest xquad-ar
# 3. + AQAD (opt-in, noisy): 4.5x the training questions, so fewer epochs.
finetune r3-aqad --epochs 4 --patience 1 --question-overlap --train arcd-train-rest xquad-ar aqad
# 4. + layer-wise learning-rate decay 0.8 (ELECTRA's): lower layers stay closer to pretraining.
finetune r4-llrd --epochs 4 --patience 1 --question-overlap --layer-lr-decay 0.8 --train arcd-train-rest xquad-ar aqad

# 5. + span-selection pretraining (recurring spans, Splinter-style; pretrain/span_selection.py): 45 minutes on the
#    encoder before recipe 3. Needs CORPUS, the preprocessed corpus text the encoder was pretrained on.
ss=$runs/encoder-span-selection
if [ -n "${CORPUS:-}" ]; then
    [ -f "$ss/model.safetensors" ] || arabert-pipeline pretrain --objective span-selection --init-from "$encoder" \
        --tokenizer "$encoder" --corpus "$CORPUS" -o "$ss" --max-seq-length 256 --batch-size 32 --lr 2e-4 \
        --warmup 0.1 --time-budget 45 --seed 0 --save-every 50 --eval-every 200 --no-progress \
        $(resume_flag "$ss")
    encoder=$ss finetune r5-span-selection --epochs 4 --patience 1 --question-overlap --train arcd-train-rest xquad-ar aqad
fi

# Decoding, on the same weights: `tune-decoding` writes a copy of a run with the decoding settings given as flags and
# the others chosen on dev. Plain (Hugging Face's decoder); + the sentence prior (weight chosen on dev); + answers kept
# inside one sentence; + expected-F1 decoding.
decoded() {  # NAME SUFFIX FLAGS...
    local out=$runs/$1$2
    [ -f "$out/arabert_pipeline.json" ] || arabert-pipeline tune-decoding "$runs/$1" --dev arcd-dev mlqa-ar-dev \
        -o "$out" "${@:3}" | tail -1
}
names=(r0-2ep r1-8ep r2-overlap r3-aqad r4-llrd)
[ -f "$runs/r5-span-selection/model.safetensors" ] && names+=(r5-span-selection)
for name in "${names[@]}"; do
    decoded "$name" -plain --sentence-prior 0 --within-sentence off --decoding max-score
    decoded "$name" -prior --within-sentence off --decoding max-score
done
decoded r3-aqad -prior-sentence --within-sentence on --decoding max-score
decoded r3-aqad -prior-sentence-ef1 --within-sentence on --decoding expected-f1

# 6. + the null answer: r3's weights, 2 more epochs at lr 1e-4 on arcd-train-rest + xquad-ar, each question also
#    paired with another paragraph of its article, labelled no-answer; decoding and no-answer threshold chosen on dev.
r6=$runs/r6-negatives
[ -f "$r6/model.safetensors" ] || arabert-pipeline finetune --model "$runs/r3-aqad" -o "$r6" \
    --train arcd-train-rest xquad-ar --negatives --dev arcd-dev mlqa-ar-dev --hold-out arcd-test tydiqa-goldp-ar-dev \
    --question-overlap --epochs 2 --patience 1 --lr 1e-4 --batch-size 32 --max-seq-length 256 --doc-stride 128 \
    --skip-misaligned --drop-leaking-train --seed 0 --no-progress $(resume_flag "$r6") 2>&1 | tee "$runs/r6-negatives.log"

# One report on dev: every run plain and with the prior, the decoding levers, the lexical baselines.
models=()
for name in "${names[@]}"; do models+=(--model "$runs/$name-plain" --label "$name"); done
for name in "${names[@]}"; do models+=(--model "$runs/$name-prior" --label "$name+prior"); done
models+=(--model "$runs/r3-aqad-prior-sentence" --label "r3-aqad+prior+sentence")
models+=(--model "$runs/r3-aqad-prior-sentence-ef1" --label "r3-aqad+prior+sentence+ef1")
[ -f "$runs/r5-span-selection/model.safetensors" ] && models+=(--model "$runs/r5-span-selection" --label "r5-span-selection+tuned")
models+=(--model "$r6" --label "r6-negatives+tuned")
arabert-pipeline evaluate --data arcd-dev --data mlqa-ar-dev -o "${REPORT:-notebooks/results/qa-levers}" --overwrite \
    "${models[@]}"

# Pooled over both dev sets (652 questions): each lever against the row before it, and the prior against none.
python - "${REPORT:-notebooks/results/qa-levers}" <<'PY'
import sys
from pathlib import Path
import numpy as np
from arabert_pipeline.evaluate.load import load_per_question, per_question_file
from arabert_pipeline.evaluate.metrics import bootstrap_means, paired_bootstrap

report, columns = Path(sys.argv[1]), ("soqal_f1", "soqal_sm", "arabic_f1")
def scores(label):
    rows = [row for name in ("arcd-dev", "mlqa-ar-dev") for row in load_per_question(report, name, label)]
    return np.array([[row[c] for c in columns] for row in rows])
def cell(paired, i):
    p = paired["p_value"][i]
    return (f"{paired['diff'][i]:+.1f} [{paired['low'][i]:+.1f}, {paired['high'][i]:+.1f}], "
            + (f"p = {p:.3f}" if p >= 0.001 else "p < 0.001"))
names = ["r0-2ep", "r1-8ep", "r2-overlap", "r3-aqad", "r4-llrd"]
pairs = [("r1-8ep", "r0-2ep"), ("r2-overlap", "r1-8ep"), ("r3-aqad", "r2-overlap"), ("r4-llrd", "r3-aqad")]
if per_question_file(report, "arcd-dev", "r5-span-selection").exists():
    names.append("r5-span-selection")
    pairs += [("r5-span-selection", "r3-aqad"), ("r5-span-selection+prior", "r3-aqad+prior"),
              ("r5-span-selection+tuned", "r3-aqad+prior+sentence+ef1")]
pairs += [(f"{name}+prior", name) for name in names]
pairs += [("r3-aqad+prior+sentence", "r3-aqad+prior"), ("r3-aqad+prior+sentence+ef1", "r3-aqad+prior+sentence")]
pairs += [("r6-negatives+tuned", "r3-aqad+prior+sentence+ef1")]
pairs += [("r6-negatives+tuned", baseline) for baseline in ("tfidf-sentence", "overlap-span", "first-sentence")]
print("| system | F1 (SOQAL) | SM (SOQAL) | F1 (Arabic) | vs | ΔF1 (SOQAL) | ΔSM (SOQAL) |\n|---|---|---|---|---|---|---|")
for new, old in [("r0-2ep", None)] + pairs:
    a = scores(new)
    low, high = np.percentile(bootstrap_means(a, resamples=10_000, seed=0), [2.5, 97.5], axis=0)
    means = 100 * a.mean(axis=0)
    row = f"| {new} | {means[0]:.1f} [{low[0]:.1f}, {high[0]:.1f}] | {means[1]:.1f} | {means[2]:.1f} |"
    if old is None:
        print(row + " | | |")
        continue
    paired = paired_bootstrap(a, scores(old), resamples=10_000, seed=0)
    print(f"{row} {old} | {cell(paired, 0)} | {cell(paired, 1)} |")
PY
