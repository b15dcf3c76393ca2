"""scripts/gpu_pretrain.sh at tiny size on the CPU: what a lent GPU runs in its calls (run, qa, continue), and what
turns the pieces they return into a model directory here (unpack), so that a call works the first time a GPU is lent."""
from __future__ import annotations

import json
import lzma
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, SHARED_DATA
from data_slices import write_first_documents

SHARD = SHARED_DATA / "corpus" / "ant-jawharafm-000.txt.xz"
SCRIPT = REPO / "scripts" / "gpu_pretrain.sh"


def script(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_run_packs_pieces_that_unpack_into_a_loadable_model(tmp_path):
    if not SHARD.exists():
        pytest.skip(f"needs the shared corpus at {SHARD}")
    from arabert_pipeline.tokenizer import train_tokenizer

    carried = tmp_path / "carried"
    carried.mkdir()
    write_first_documents(SHARD, tmp_path / "corpus.txt", 120)
    (carried / "corpus.txt.xz").write_bytes(lzma.compress((tmp_path / "corpus.txt").read_bytes()))
    train_tokenizer([str(tmp_path / "corpus.txt")], carried / "tokenizer", model_type="unigram", vocab_size=800,
                    preprocess="none", threads=1, progress=False)
    env = dict(os.environ, PYTHON=sys.executable, WORK=str(tmp_path / "work"), SIZE="L2-H64", MINUTES="0.15",
               BATCH="8", SEQ="32", LR="1e-3", OMP_NUM_THREADS="1")
    out = tmp_path / "out"
    ran = script("run", str(carried), str(out), env=env)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "pretrain exit 0" in (out / "run.log").read_text()
    pieces = sorted(out.glob("model.tar.part-*"))
    assert pieces and all(p.stat().st_size <= 15 * 2**20 for p in pieces)

    model = tmp_path / "model"
    unpacked = script("unpack", str(out), str(model), env=env)
    assert unpacked.returncode == 0, unpacked.stdout + unpacked.stderr
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoModel

    config = AutoConfig.from_pretrained(model)
    assert (config.model_type, config.num_hidden_layers, config.hidden_size) == ("deberta-v2", 2, 64)
    assert {str(t.dtype) for t in load_file(model / "model.safetensors").values() if t.is_floating_point()} == {
        "torch.float32"}
    AutoModel.from_pretrained(model)
    assert (model / "log.jsonl").exists() and (model / "tokenizer.json").exists()
    # unpack never replaces a directory it did not create
    again = script("unpack", str(out), str(model), env=env)
    assert again.returncode == 2 and "exists" in again.stderr

    # qa: the returned pieces and a SQuAD set carried to the GPU come back as a QA model, pieces again
    for piece in pieces:
        (carried / piece.name).write_bytes(piece.read_bytes())
    paragraphs = (tmp_path / "corpus.txt").read_text(encoding="utf-8").split("\n")
    context = next(p for p in paragraphs if len(p.split()) > 30)
    answer = context.split()[5]
    squad = {"data": [{"title": "t", "paragraphs": [{"context": context, "qas": [
        {"id": f"q{i}", "question": "ما " + " ".join(context.split()[:4]) + "؟",
         "answers": [{"text": answer, "answer_start": context.index(answer)}]} for i in range(6)]}]}]}
    (carried / "train.json.xz").write_bytes(lzma.compress(json.dumps(squad, ensure_ascii=False).encode()))
    qa_out = tmp_path / "qa-out"
    tuned = script("qa", str(carried), str(qa_out),
                   env=dict(env, WORK=str(tmp_path / "qa-work"), BATCH="4", STRIDE="16"))
    assert tuned.returncode == 0, tuned.stdout + tuned.stderr
    assert "finetune exit 0" in (qa_out / "run.log").read_text()
    qa_model = tmp_path / "qa-model"
    assert script("unpack", str(qa_out), str(qa_model), env=env).returncode == 0
    from arabert_pipeline.artifacts.metadata import read_metadata

    assert read_metadata(qa_model)["task"] == "question-answering" and (qa_model / "sentence_idf.json").exists()

    # continue: the same pieces, corpus and synthetic set, plus a data root, come back as the last QA stage's model,
    # with the continued pretraining's log; TRAIN / DEV / HOLD_OUT name files here instead of the registered sets.
    data = carried / "data"
    data.mkdir()
    sets = {}
    for name, start in (("train", 0), ("dev", 40), ("held", 80)):
        words = " ".join(" ".join(paragraphs).split()[start:start + 40])
        answer = words.split()[7]
        sets[name] = data / f"{name}.json"
        sets[name].write_text(json.dumps({"data": [{"title": name, "paragraphs": [{"context": words, "qas": [
            {"id": f"{name}{i}", "question": "ما " + " ".join(words.split()[i:i + 3]) + "؟",
             "answers": [{"text": answer, "answer_start": words.index(answer)}]} for i in range(12)]}]}]},
            ensure_ascii=False), encoding="utf-8")

    def run_continue(source: Path, name: str, **settings: str) -> tuple[subprocess.CompletedProcess, Path]:
        """`continue` from SOURCE into tmp_path/NAME-out, scratch in tmp_path/NAME-work, on the three sets above."""
        out = tmp_path / f"{name}-out"
        done = script("continue", str(source), str(out), env=dict(
            env, WORK=str(tmp_path / f"{name}-work"), BATCH="4", STRIDE="16", TRAIN=str(sets["train"]),
            DEV=str(sets["dev"]), HOLD_OUT=str(sets["held"]), **settings))
        return done, out

    continued, continued_out = run_continue(carried, "continue", MINUTES="0.1", HARD_LIMIT="560")
    assert continued.returncode == 0, continued.stdout + continued.stderr
    log = (continued_out / "run.log").read_text()
    for name in ("pretrain", "synthetic", "real", "negatives"):
        assert f"{name} exit 0" in log, log
    assert "packing negatives" in log
    pretrain_log = [json.loads(line) for line in (continued_out / "pretrain-log.jsonl").read_text().splitlines()]
    assert any("eval_loss" in record for record in pretrain_log)
    assert (continued_out / "real-log.jsonl").exists()
    continued_model = tmp_path / "continued-model"
    assert script("unpack", str(continued_out), str(continued_model), env=env).returncode == 0
    assert read_metadata(continued_model)["task"] == "question-answering"

    # FROM=synthetic: the pieces are a QA model after the synthetic stage, so only the real sets and the negatives run
    # (here the model just returned stands in for it).
    rest = tmp_path / "rest"
    rest.mkdir()
    for piece in continued_out.glob("model.tar.part-*"):
        (rest / piece.name).write_bytes(piece.read_bytes())
    (rest / "data").symlink_to(data)
    finished, rest_out = run_continue(rest, "rest", FROM="synthetic", HARD_LIMIT="560")
    assert finished.returncode == 0, finished.stdout + finished.stderr
    log = (rest_out / "run.log").read_text()
    assert "pretrain exit" not in log and "real exit 0" in log and "packing negatives" in log, log

    # A deadline too short for any fine-tuning: the stages say so and the last one that finished comes back; a WORK
    # that already holds something is refused before anything runs.
    short, short_out = run_continue(rest, "short", FROM="synthetic", HARD_LIMIT="55")
    assert short.returncode == 0, short.stdout + short.stderr
    log = (short_out / "run.log").read_text()
    assert "no time left for real" in log and "skipped negatives: real did not finish" in log
    assert "packing synthetic" in log and list(short_out.glob("model.tar.part-*"))
    refused = script("continue", str(rest), str(tmp_path / "refused-out"), env=dict(
        env, WORK=str(tmp_path / "short-work"), FROM="synthetic"))
    assert refused.returncode == 2 and "not empty" in refused.stderr
