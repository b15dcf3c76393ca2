#!/usr/bin/env bash
# Issue 39, lever 3: one lent GPU call pretrains a larger DeBERTa than the 2-core CPU can, and brings it back.
#
# A lent GPU machine is bare and offline, runs one command of at most 10 minutes, takes a working tree of at most
# 64 MiB and returns at most 8 files of 16 MiB. So the work is split in three, each a mode of this script:
#
#   prepare DIR        here, on the CPU: the AraBERTv0.2-normalized corpus (xz) and the shipped model's tokenizer
#                      into DIR, which the GPU call carries. ant-multisource-006 stays held out, as for the tokenizer.
#   run DIR OUT        on the GPU: pretrain (DeBERTa-v2 + enhanced mask decoder, MLM, whole-word masking) for
#                      $MINUTES of wall clock, then the exported model, its weights in fp16, as a tar cut into
#                      15 MiB pieces in OUT, with the run's log. Uses the package from this checkout (PYTHONPATH),
#                      and the machine's own torch / transformers / tokenizers.
#   continue DIR OUT   on the GPU, for a second lease: DIR holds the encoder as pieces (what run returned), the corpus
#                      (corpus.txt.xz), a synthetic SQuAD set (train.json.xz) and a data root (data/: the QA sets that
#                      $TRAIN, $DEV and $HOLD_OUT name). The encoder's pretraining continues for $MINUTES
#                      (lr $LR, warm-up and linear decay again), then the QA recipe of train_default_model.sh step 4:
#                      the synthetic stage, the real sets (epoch chosen on $DEV), the negatives stage. The last stage
#                      that finished comes back as pieces, with the pretraining and fine-tuning logs; every stage gets
#                      what is left of $HARD_LIMIT seconds, so something comes back (at the defaults the negatives
#                      stage rarely fits: run it with FROM=synthetic in a second call). FROM=synthetic: DIR's
#                      pieces are the synthetic stage's QA model (what an earlier call returned), so only the real
#                      sets and the negatives run. Wheels in DIR/wheels (camel-tools and emoji, which the dev scoring
#                      imports and the GPU image lacks: `prepare` downloads them) are installed first.
#   soup DIR OUT       on the GPU: DIR holds a QA model as pieces (e.g. the shipped one, tarred and split as pack does),
#                      a data root (data/; .xz files are unpacked there) and wheels/. $SEEDS runs of the last QA stage
#                      (the real sets + unanswerable pairs, lr $LR, $EPOCHS epochs, epoch chosen on $DEV; the
#                      decoding grid skipped: the soup scores plain decoding) each start
#                      from that model, as many as $HARD_LIMIT seconds allow ($SEED_SECONDS the least a seed is
#                      started with, $SOUP_SECONDS kept for the soup); then a greedy soup of the start and the seeds on
#                      dev (`arabert-pipeline soup`) comes back as pieces.
#   unpack OUT MODEL   here again: the pieces joined into the model directory MODEL, weights back in fp32, ready for
#                      `arabert-pipeline finetune --model MODEL`.
#   qa DIR OUT         on the GPU: DIR holds an encoder as pieces (model.tar.part-*, what run returned) and a SQuAD
#                      training set (train.json.xz, e.g. make-synthetic-qa's output): the encoder fine-tuned on it for
#                      $EPOCHS epochs (no dev set: what a CPU can't do in hours, the real sets and dev follow here), the
#                      QA model returned as pieces like run's; a safety limit stops it at its last checkpoint.
#
# The model is the same DeBERTa recipe as the shipped encoder (scripts/train_default_model.sh step 3), deeper and
# wider ($SIZE, default L6-H384: ~23 M parameters, 44 MiB in fp16), with GPU-sized batches. CPU test at tiny size:
# tests/test_gpu_pretrain_script.py. Variables: ARABERT_PIPELINE_DATA (prepare), SIZE, MINUTES, BATCH, LR, SEQ, and
# for qa EPOCHS, STRIDE, SAVE_STEPS, HARD_LIMIT (seconds), and for continue TRAIN, DEV, HOLD_OUT (data set names or
# files), FROM, WORK (a new or empty scratch directory; default a fresh one under /tmp).
set -euo pipefail

mode=${1:?usage: gpu_pretrain.sh prepare DIR | run DIR OUT | unpack OUT MODEL | qa DIR OUT | continue DIR OUT | soup DIR OUT}
here=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}
ship=$here/arabert_pipeline/models/arabert-mini

# The run directory's model (or, when the safety limit stopped it, its newest checkpoint's) as 15 MiB pieces of a tar
# in OUT, weights in fp16.
pack() {
    local run=$1 out=$2 work=${WORK:-/tmp/gpu-pretrain}
    "$python" - "$run" "$work/pack" <<'EOF'
import json, shutil, sys
from pathlib import Path
from safetensors.torch import load_file, save_file

run, pack = Path(sys.argv[1]), Path(sys.argv[2])
if (run / "model.safetensors").exists():
    source = run
else:  # stopped at the safety limit: the newest checkpoint's exported model
    saved = sorted((run / "checkpoints").glob("step-*"), key=lambda p: int(p.name.split("-")[-1]))
    if not saved:
        sys.exit(f"{run}: neither a final model nor a checkpoint to pack")
    source = saved[-1] / "model"
    print(f"no final export; packing {source}")
shutil.rmtree(pack, ignore_errors=True)
pack.mkdir(parents=True)
for name in ("config.json", "arabert_pipeline.json", "tokenizer.json", "tokenizer_config.json", "sentence_idf.json"):
    if (source / name).exists():
        shutil.copy(source / name, pack / name)
weights = load_file(source / "model.safetensors")
save_file({k: v.half() if v.is_floating_point() else v for k, v in weights.items()}, pack / "model.safetensors",
          metadata={"format": "pt"})
for name in ("log.jsonl",):
    if (run / name).exists():
        shutil.copy(run / name, pack / name)
print(json.dumps({"packed": str(source), "tensors": len(weights)}))
EOF
    tar -C "$work/pack" -cf - . | split -b 15M -d - "$out/model.tar.part-"
}

# What the multi-stage GPU modes (continue, soup) share, for NAME: OUT created and the output logged to OUT/run.log,
# a fresh scratch dir in $work, $deadline at $HARD_LIMIT seconds from now, the package and DIR/wheels importable.
start_session() {
    mkdir -p "$out"
    # A fresh scratch dir each call: a second call on the same warm machine must not meet the first one's stages.
    work=${WORK:-$(mktemp -d "/tmp/gpu-$1.XXXXXX")}
    if [ -n "$(ls -A "$work" 2>/dev/null)" ]; then echo "WORK=$work is not empty: give a new directory" >&2; exit 2; fi
    deadline=$(( $(date +%s) + ${HARD_LIMIT:-500} ))
    exec > >(tee -a "$out/run.log") 2>&1
    nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
    export PYTHONPATH=$here${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
    mkdir -p "$work"
    if [ -d "$dir/wheels" ]; then
        "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$work/site" \
            "$dir"/wheels/*.whl
        export PYTHONPATH=$PYTHONPATH:$work/site
    fi
}

case "$mode" in
prepare)
    dir=${2:?prepare DIR}
    : "${ARABERT_PIPELINE_DATA:?point ARABERT_PIPELINE_DATA at the data root (corpus/)}"
    mkdir -p "$dir/tokenizer"
    if [ ! -f "$dir/corpus.txt.xz" ]; then
        shards=$(ls "$ARABERT_PIPELINE_DATA"/corpus/*.txt.xz | sort | grep -v ant-multisource-006)
        arabert-pipeline preprocess $shards -o "$dir/corpus.txt.xz" --preprocessing arabertv02 \
            --workers "${WORKERS:-2}"
    fi
    # What `continue` needs on the GPU and its image lacks (pure Python).
    [ -d "$dir/wheels" ] || "$python" -m pip download -q --no-deps --only-binary=:all: -d "$dir/wheels" \
        camel-tools==1.6.0 emoji==2.16.0
    # The shipped model's tokenizer, so the new encoder slots into the same QA pipeline and the same token cache.
    cp "$ship/tokenizer.json" "$ship/tokenizer_config.json" "$dir/tokenizer/"
    "$python" - "$ship" "$dir/tokenizer" <<'EOF'
import sys
from arabert_pipeline.artifacts.metadata import read_metadata, write_metadata
write_metadata(sys.argv[2], preprocessing=read_metadata(sys.argv[1])["preprocessing"])
EOF
    du -sh "$dir"/*
    ;;
run)
    dir=${2:?run DIR OUT} out=${3:?run DIR OUT}
    mkdir -p "$out"
    work=${WORK:-/tmp/gpu-pretrain}
    run=$work/deberta-${SIZE:-L6-H384}
    exec > >(tee -a "$out/run.log") 2>&1
    nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
    export PYTHONPATH=$here${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
    "$python" -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(),
        'transformers', transformers.__version__)"
    began=$(date +%s)
    # SIGINT at the safety limit: the engine finishes its step and saves a checkpoint, which is packed instead.
    # --no-compile: the path measured here (docs/pretraining.md); the enhanced mask decoder has not been timed
    # compiled on a GPU, and a failed trace would cost the lease.
    status=0
    timeout -s INT "${HARD_LIMIT:-510}" "$python" -m arabert_pipeline.cli pretrain --tokenizer "$dir/tokenizer" \
        --corpus "$dir/corpus.txt.xz" -o "$run" --objective mlm --architecture deberta-v2 --enhanced-mask-decoder \
        --model-size "${SIZE:-L6-H384}" --max-seq-length "${SEQ:-256}" --whole-word-masking \
        --time-budget "${MINUTES:-7}" --batch-size "${BATCH:-256}" --lr "${LR:-1e-3}" --warmup 0.06 --dropout 0 \
        --seed 0 --save-every 1000 --eval-every 500 --log-every 20 --bf16 auto --cache-dir "$work/cache" \
        --no-compile --no-progress || status=$?
    echo "pretrain exit $status after $(( $(date +%s) - began )) s"
    pack "$run" "$out"
    ls -l "$out"
    ;;
qa)
    dir=${2:?qa DIR OUT} out=${3:?qa DIR OUT}
    mkdir -p "$out"
    work=${WORK:-/tmp/gpu-qa}
    exec > >(tee -a "$out/run.log") 2>&1
    nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
    export PYTHONPATH=$here${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
    mkdir -p "$work"
    bash "$0" unpack "$dir" "$work/encoder"
    xz -dc "$dir/train.json.xz" > "$work/train.json"
    began=$(date +%s)
    status=0
    timeout -s INT "${HARD_LIMIT:-200}" "$python" -m arabert_pipeline.cli finetune --model "$work/encoder" \
        -o "$work/qa" --train "$work/train.json" --epochs "${EPOCHS:-1}" --lr "${LR:-3e-4}" \
        --batch-size "${BATCH:-64}" --question-overlap --max-seq-length "${SEQ:-256}" --doc-stride "${STRIDE:-128}" \
        --skip-misaligned --seed 0 --save-steps "${SAVE_STEPS:-200}" --no-progress || status=$?
    echo "finetune exit $status after $(( $(date +%s) - began )) s"
    pack "$work/qa" "$out"
    ls -l "$out"
    ;;
continue)
    dir=${2:?continue DIR OUT} out=${3:?continue DIR OUT}
    start_session continue
    export ARABERT_PIPELINE_DATA=$dir/data
    # seconds left for a stage: what remains before the deadline, less 50 for the kill grace (20) and packing
    left() { echo $(( deadline - $(date +%s) - 50 )); }
    from=${FROM:-encoder}
    case "$from" in encoder | synthetic) ;; *) echo "FROM=$from: encoder or synthetic" >&2; exit 2 ;; esac
    bash "$0" unpack "$dir" "$work/$from"
    [ "$from" = synthetic ] || xz -dc "$dir/train.json.xz" > "$work/synthetic.json"
    read -r -a train <<< "${TRAIN:-arcd-train-rest xquad-ar}"
    read -r -a dev <<< "${DEV:-arcd-dev mlqa-ar-dev}"
    read -r -a hold_out <<< "${HOLD_OUT:-arcd-test tydiqa-goldp-ar-dev}"
    qa=(--question-overlap --max-seq-length "${SEQ:-256}" --doc-stride "${STRIDE:-128}" --skip-misaligned --seed 0
        --no-progress)
    real=(--train "${train[@]}" --dev "${dev[@]}" --hold-out "${hold_out[@]}" --drop-leaking-train)
    # stage NAME INPUT ARGS...: runs one arabert-pipeline verb into $work/NAME within the time left, skipped when the
    # stage it starts from (INPUT) did not finish; the last stage that finished is what gets packed. SIGINT at the
    # deadline lets the engine stop at its step; 20 s later a stage still running (setup, dev scoring) is killed.
    last=""
    stage() {
        local name=$1 input=$2; shift 2
        if [ -f "$work/$name/model.safetensors" ]; then echo "$name: given"; last=$name; return; fi
        if [ ! -f "$work/$input/model.safetensors" ]; then echo "skipped $name: $input did not finish"; return; fi
        local began status=0 budget; began=$(date +%s); budget=$(left)
        if [ "$budget" -le 10 ]; then echo "no time left for $name"; return; fi
        timeout -k 20 -s INT "$budget" "$python" -m arabert_pipeline.cli "$@" -o "$work/$name" || status=$?
        echo "$name exit $status after $(( $(date +%s) - began )) s"
        [ -f "$work/$name/model.safetensors" ] && last=$name
        return 0
    }
    # --no-compile: as in `run`.
    [ "$from" = synthetic ] || stage pretrain encoder pretrain --init-from "$work/encoder" \
        --tokenizer "$work/encoder" --corpus "$dir/corpus.txt.xz" --objective mlm --architecture deberta-v2 \
        --enhanced-mask-decoder --max-seq-length "${SEQ:-256}" --whole-word-masking \
        --time-budget "${MINUTES:-3}" --batch-size "${BATCH:-256}" --lr "${LR:-5e-4}" --warmup 0.06 --dropout 0 \
        --seed 1 --save-every 1000 --eval-every 500 --log-every 50 --bf16 auto --cache-dir "$work/cache" \
        --no-compile --no-progress
    [ -f "$work/pretrain/log.jsonl" ] && cp "$work/pretrain/log.jsonl" "$out/pretrain-log.jsonl"
    stage synthetic pretrain finetune --model "$work/pretrain" --train "$work/synthetic.json" --epochs 1 --lr 3e-4 \
        --batch-size 64 --save-steps 100000 "${qa[@]}"
    stage real synthetic finetune --model "$work/synthetic" "${real[@]}" --epochs 4 --patience 1 --lr 3e-4 \
        --batch-size 32 --save-steps 100000 "${qa[@]}"
    [ -f "$work/real/log.jsonl" ] && cp "$work/real/log.jsonl" "$out/real-log.jsonl"
    stage negatives real finetune --model "$work/real" "${real[@]}" --negatives --epochs 2 --patience 1 --lr 1e-4 \
        --batch-size 32 --save-steps 100000 "${qa[@]}"
    if [ -z "$last" ]; then
        # nothing finished: the continued pretraining's newest checkpoint, if it saved one, still comes back
        if ! ls "$work"/pretrain/checkpoints/step-* > /dev/null 2>&1; then
            echo "no stage finished: nothing to pack"; exit 1
        fi
        last=pretrain
    fi
    echo "packing $last"
    pack "$work/$last" "$out"
    ls -l "$out"
    ;;
soup)
    dir=${2:?soup DIR OUT} out=${3:?soup DIR OUT}
    start_session soup
    export ARABERT_PIPELINE_DATA=$work/data
    # The data root travels compressed (the working tree's limit): its .xz files are unpacked beside the others.
    cp -rL "$dir/data" "$work/data"
    find "$work/data" -name '*.xz' -exec xz -d {} +
    bash "$0" unpack "$dir" "$work/start"
    # The start's reader (reader/) did not travel: its weight goes to 0 so that the start loads and is scored alone.
    "$python" - "$work/start" <<'EOF2'
import sys
from arabert_pipeline.artifacts.metadata import read_metadata, write_metadata
write_metadata(sys.argv[1], **{**read_metadata(sys.argv[1]), "reader_weight": 0.0})
EOF2
    read -r -a train <<< "${TRAIN:-arcd-train-rest xquad-ar}"
    read -r -a dev <<< "${DEV:-arcd-dev mlqa-ar-dev}"
    read -r -a hold_out <<< "${HOLD_OUT:-arcd-test tydiqa-goldp-ar-dev}"
    members=()
    for seed in ${SEEDS:-1 2 3}; do
        # what is left, less the soup's dev passes and the packing, and the 20 s a seed may take to stop
        budget=$(( deadline - $(date +%s) - ${SOUP_SECONDS:-90} - 20 ))
        if [ "$budget" -le "${SEED_SECONDS:-100}" ]; then echo "no time left for seed $seed"; break; fi
        began=$(date +%s) status=0
        timeout -k 20 -s INT "$budget" "$python" -m arabert_pipeline.cli finetune --model "$work/start" \
            --train "${train[@]}" --dev "${dev[@]}" --hold-out "${hold_out[@]}" --drop-leaking-train --negatives \
            --epochs "${EPOCHS:-2}" --patience 1 --lr "${LR:-1e-4}" --batch-size "${BATCH:-32}" --save-steps 100000 \
            --question-overlap --max-seq-length "${SEQ:-256}" --doc-stride "${STRIDE:-128}" --skip-misaligned \
            --sentence-prior 0 --within-sentence off --decoding max-score \
            --seed "$seed" --no-progress -o "$work/seed-$seed" || status=$?
        echo "seed $seed exit $status after $(( $(date +%s) - began )) s"
        # the metadata is the last file a finished run writes
        [ -f "$work/seed-$seed/arabert_pipeline.json" ] && members+=("$work/seed-$seed")
    done
    if [ "${#members[@]}" -eq 0 ]; then echo "no seed finished: nothing to pack"; exit 1; fi
    "$python" -m arabert_pipeline.cli soup "$work/start" "${members[@]}" -o "$work/soup" --dev "${dev[@]}" \
        --device "${DEVICE:-cuda}" --batch-size "${BATCH:-32}"
    pack "$work/soup" "$out"
    ls -l "$out"
    ;;
unpack)
    out=${2:?unpack OUT MODEL} model=${3:?unpack OUT MODEL}
    if [ -e "$model" ]; then echo "$model exists: give a new directory" >&2; exit 2; fi
    mkdir -p "$model.tmp"
    cat "$out"/model.tar.part-* | tar -C "$model.tmp" -xf -
    "$python" - "$model.tmp" <<'EOF'
import sys
from pathlib import Path
from safetensors.torch import load_file, save_file

path = Path(sys.argv[1]) / "model.safetensors"
weights = load_file(path)
save_file({k: v.float() if v.is_floating_point() else v for k, v in weights.items()}, path, metadata={"format": "pt"})
EOF
    mv "$model.tmp" "$model"
    echo "unpacked into $model"
    ;;
*)
    echo "unknown mode $mode: prepare, run, qa, continue, soup or unpack" >&2
    exit 2
    ;;
esac
