"""Pretraining speed on one GPU (issue 51): the package's `pretrain` beside Hugging Face's Trainer, in one run.

Two steps, because a lent GPU machine is bare, offline and reached through a 64 MiB copy:

    # here, on the CPU: a self-contained folder (≤ 40 MiB): this script, the package without its shipped models,
    # a preprocessed corpus (the first --lines lines of a shard, arabertv02) and the shipped model's 32k tokenizer
    python benchmarks/bench_pretrain_gpu.py prepare .gpu-bench
    # on the GPU machine, one command of ≤ 6 minutes; the JSON comes back
    python .gpu-bench/bench_pretrain_gpu.py run .gpu-bench --out "$OUT/bench_pretrain_gpu.json"

`run` measures each row in a child process of its own (a fresh CUDA context, its own peak memory, a crash or an
out-of-memory costs that row only), most important rows first, and stops starting rows at --deadline seconds: the
JSON is rewritten after every row, so what finished comes back. Per row: tokens/s over --steps timed optimizer steps
after --warmup-steps untimed ones (compilation included there), between two `torch.cuda.synchronize()`, timed again
(up to twice) when torch.compile traced a graph inside them (`retimed`; `graphs_traced_while_timed` > 0 says the row
never reached the steady state); with --profile-steps N, N more steps under torch.profiler after the timed ones,
whose busiest operators a step (device time on a GPU) the row keeps as `profile`; tokens are those the model reads
(padding excluded); MFU = tokens/s × (6 × non-embedding parameters + 12 × layers × hidden × seq) / the device's
dense bf16 peak (training/logs.py's table, or --peak-tflops); the peak CUDA memory; the mean training loss of the
last ten timed steps with the tokens read by then (the loss at equal tokens; a retimed row's comes later). Every
row's learning-rate schedule is planned for the same number of steps (planned_steps: room for the retimings and the
profiled steps), so the rows' losses compare with each other, not with the first H200 run's
(notebooks/results/gpu-bench/).

Rows, all at --tokens-per-step tokens per optimizer step (default 32,768 = 256 × 128), AdamW, lr 5e-4, 6% warm-up,
seed 42, bf16 on a GPU:
- package rows: `pretrain` with the GPU levers (loader workers, --compile, fused AdamW; each row sets compile itself,
  whatever the package's default; `-plain`: without workers and compile, the path measured before issue 51; `-eager`:
  workers without compile): BERT-base seq 128 random and whole-word masking, seq 512, DeBERTa-v2 base with and
  without the enhanced mask decoder and with `--deberta-attention sdpa` (`deberta-128-sdpa-eager`: without compile,
  as the package runs it on a GPU), ELECTRA base (DeBERTaV3-style RTD);
- Hugging Face: `transformers.Trainer` + `BertForMaskedLM` (the same config) + `DataCollatorForLanguageModeling(0.15)`
  over run_mlm.py's `group_texts` blocks of the same corpus and tokenizer, with its defaults, and with 4 loader workers.

The ratios that issue 51's targets read are printed at the end (package vs HF with 4 workers, whole-word vs random
masking, each lever set vs the plain path, MFU). The CPU runs every row at tiny size (tests/test_bench_pretrain_gpu.py):
`run DIR --size tiny --seq 32 --tokens-per-step 512 --steps 2 --warmup-steps 1`.
"""
from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import lzma
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SHARED = Path(os.environ.get("ARABERT_PIPELINE_TEST_DATA", REPO.parent / "shared" / "data"))
FOLDER_LIMIT = 40 * 2**20

# name → (kind, options). In the order they run: what the targets read first, so a short lease still answers them.
ROWS: dict[str, tuple[str, dict]] = {
    "bert-128": ("package", {"architecture": "bert"}),
    "hf-trainer-4w": ("hf", {"workers": 4}),
    "bert-128-wwm": ("package", {"architecture": "bert", "whole_word_masking": True}),
    "bert-512": ("package", {"architecture": "bert", "max_seq_length": 512}),
    "deberta-128": ("package", {"architecture": "deberta-v2"}),
    "deberta-128-eager": ("package", {"architecture": "deberta-v2", "compile": False}),
    # DeBERTa's disentangled attention through SDPA (--deberta-attention sdpa), right after the row it is read against:
    # eager, as the package runs it on a GPU (compiled, its backward pass failed on the 2026-11-28 H200 run).
    "deberta-128-sdpa-eager": ("package", {"architecture": "deberta-v2", "deberta_attention": "sdpa",
                                           "compile": False}),
    "bert-128-plain": ("package", {"architecture": "bert", "plain": True}),
    "deberta-128-plain": ("package", {"architecture": "deberta-v2", "plain": True}),
    "bert-128-eager": ("package", {"architecture": "bert", "compile": False}),
    "hf-trainer": ("hf", {"workers": 0}),
    "deberta-128-emd": ("package", {"architecture": "deberta-v2", "enhanced_mask_decoder": True}),
    "electra-128": ("package", {"architecture": "bert", "objective": "electra"}),
}


# ------------------------------------------------------------------------------------------------------- prepare


def prepare(args) -> None:
    sys.path.insert(0, str(REPO))
    from arabert_pipeline.artifacts.metadata import read_metadata, write_metadata
    from arabert_pipeline.cli import main as cli
    from arabert_pipeline.tokenizer.export import save_pretrained_tokenizer
    from arabert_pipeline.tokenizer.load import load_pretrained_tokenizer

    folder = Path(args.folder)
    if folder.exists() and any(folder.iterdir()):
        sys.exit(f"{folder} is not empty: give a new folder")
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(Path(__file__), folder / Path(__file__).name)
    copy_package(folder)
    raw = Path(tempfile.mkdtemp()) / "raw.txt"
    source = Path(args.corpus) if args.corpus else SHARED / "corpus" / f"{args.shard}.txt.xz"
    opener = lzma.open if source.suffix == ".xz" else open
    with opener(source, "rt", encoding="utf-8") as f:
        raw.write_text("".join(itertools.islice(f, args.lines)), encoding="utf-8")
    corpus = folder / "corpus.txt"
    assert cli(["preprocess", str(raw), "-o", str(corpus), "--preprocessing", "arabertv02", "--no-progress"]) == 0
    shutil.rmtree(raw.parent)
    tokenizer = load_pretrained_tokenizer(args.tokenizer)
    save_pretrained_tokenizer(tokenizer, folder / "tokenizer")
    write_metadata(folder / "tokenizer", preprocessing=read_metadata(args.tokenizer)["preprocessing"])
    check_folder_size(folder, "use fewer --lines")


def copy_package(folder: Path) -> None:
    """The package without its shipped models, as folder/src/arabert_pipeline (also bench_finetune_gpu.py's)."""
    shutil.copytree(REPO / "arabert_pipeline", folder / "src" / "arabert_pipeline",
                    ignore=shutil.ignore_patterns("__pycache__", "models"))


def check_folder_size(folder: Path, advice: str) -> int:
    """Prints the folder's size; exits, with `advice`, when it is over FOLDER_LIMIT."""
    size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    print(f"{folder}: {size / 2**20:.1f} MiB (limit {FOLDER_LIMIT / 2**20:.0f})")
    if size > FOLDER_LIMIT:
        sys.exit(f"{folder} is over {FOLDER_LIMIT / 2**20:.0f} MiB: {advice}")
    return size


# ------------------------------------------------------------------------------------------------------- run


def run(args) -> None:
    import torch

    folder, out = Path(args.folder).resolve(), Path(args.out)
    names = args.rows.split(",") if args.rows else list(ROWS)
    unknown = [name for name in names if name not in ROWS]
    if unknown:
        sys.exit(f"--rows: unknown {', '.join(unknown)} (rows: {', '.join(ROWS)})")
    cuda = torch.cuda.is_available()
    report = {
        "device": torch.cuda.get_device_name(0) if cuda else "cpu",
        "torch": torch.__version__, "cuda": torch.version.cuda, "cpus": os.cpu_count(),
        "settings": {k: v for k, v in vars(args).items() if k not in ("func", "out")},
        "rows": {},
    }
    import transformers

    report["transformers"] = transformers.__version__
    print(f"{report['device']}, torch {report['torch']}, transformers {report['transformers']}", flush=True)
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="bench-pretrain-gpu-"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder / "src"), os.environ.get("PYTHONPATH", "")]),
           "PYTHONUNBUFFERED": "1", "TORCHINDUCTOR_CACHE_DIR": str(work / "inductor")}  # shared: rows reuse kernels
    for name in names:
        left = args.deadline - (time.monotonic() - started)
        if left < 20:
            report["rows"][name] = {"error": "not run: the deadline was reached"}
            continue
        result_file = work / f"{name}.json"
        command = [sys.executable, str(Path(__file__).resolve()), "row", name, str(folder), "--json", str(result_file),
                   "--work", str(work / name), *common_flags(args)]
        try:
            done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=left)
            if done.returncode == 0:
                report["rows"][name] = json.loads(result_file.read_text(encoding="utf-8"))
            else:
                report["rows"][name] = {"error": f"exit {done.returncode}: {done.stderr[-1500:]}"}
        except subprocess.TimeoutExpired as stopped:
            # TimeoutExpired carries bytes whatever text= says; the last progress line tells where the time went
            captured = stopped.stderr or b""
            lines = (captured.decode("utf-8", "replace") if isinstance(captured, bytes) else captured).splitlines()
            reached = [line for line in lines if line.startswith("step ")][-1:]
            report["rows"][name] = {"error": f"stopped at the deadline ({args.deadline:.0f} s)"
                                             + (f"; the last progress: {reached[0]}" if reached else "; before step 1")}
        print(f"{name}: {summary(report['rows'][name])}", flush=True)
        report["ratios"] = ratios(report["rows"])
        write_json(out, report)
    report["seconds"] = round(time.monotonic() - started, 1)
    write_json(out, report)
    shutil.rmtree(work, ignore_errors=True)
    print(table(report))


def common_flags(args) -> list[str]:
    flags = ["--size", args.size, "--seq", str(args.seq), "--tokens-per-step", str(args.tokens_per_step),
             "--steps", str(args.steps), "--warmup-steps", str(args.warmup_steps),
             "--profile-steps", str(args.profile_steps)]
    return flags + (["--peak-tflops", str(args.peak_tflops)] if args.peak_tflops else [])


def write_json(path: Path, report: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(report, indent=1, ensure_ascii=False), encoding="utf-8")
    os.replace(temporary, path)


def summary(row: dict) -> str:
    if "error" in row:
        return row["error"].strip().splitlines()[-1][:300] if row["error"].strip() else "error"
    mfu = f", MFU {row['mfu']:.1%}" if row.get("mfu") is not None else ""
    memory = f", peak {row['peak_gib']:.1f} GiB" if row.get("peak_gib") is not None else ""
    retraced = f" (NOT STEADY: {row['graphs_traced_while_timed']} graph(s) traced while timed)" \
        if row.get("graphs_traced_while_timed") else ""
    return (f"{row['tokens_per_second']:,.0f} tokens/s{mfu}{memory}, loss {row['loss']:.3f} after {row['tokens']:,} "
            f"tokens{retraced}")


def ratios(rows: dict) -> dict[str, float]:
    """What the issue's targets compare, from the rows measured in this run."""
    def speed(name):
        row = rows.get(name, {})
        return row.get("tokens_per_second")

    pairs = {"bert-128 / hf-trainer-4w": ("bert-128", "hf-trainer-4w"),
             "bert-128 / hf-trainer": ("bert-128", "hf-trainer"),
             "bert-128-wwm / bert-128": ("bert-128-wwm", "bert-128"),
             "bert-128 / bert-128-plain": ("bert-128", "bert-128-plain"),
             "bert-128-eager / bert-128-plain": ("bert-128-eager", "bert-128-plain"),
             "deberta-128 / deberta-128-plain": ("deberta-128", "deberta-128-plain"),
             "deberta-128 / deberta-128-eager": ("deberta-128", "deberta-128-eager"),
             "deberta-128-sdpa-eager / deberta-128-eager": ("deberta-128-sdpa-eager", "deberta-128-eager"),
             "deberta-128-sdpa-eager / deberta-128": ("deberta-128-sdpa-eager", "deberta-128"),
             "hf-trainer-4w / hf-trainer": ("hf-trainer-4w", "hf-trainer")}
    return {label: round(speed(a) / speed(b), 3) for label, (a, b) in pairs.items() if speed(a) and speed(b)}


def table(report: dict) -> str:
    lines = [f"\n{report['device']} (torch {report['torch']}, transformers {report['transformers']})", "",
             "| row | tokens/s | MFU | peak GPU memory (GiB) | loss (tokens) |", "|---|---:|---:|---:|---|"]
    for name, row in report["rows"].items():
        if "error" in row:
            lines.append(f"| {name} | {summary(row)[:80]} | | | |")
            continue
        mfu = f"{row['mfu']:.1%}" if row.get("mfu") is not None else "n/a"
        memory = f"{row['peak_gib']:.1f}" if row.get("peak_gib") is not None else "n/a"
        lines.append(f"| {name} | {row['tokens_per_second']:,.0f} | {mfu} | {memory} | "
                     f"{row['loss']:.3f} ({row['tokens']:,}) |")
    lines += [""] + [f"{label}: {value:.2f}×" for label, value in report.get("ratios", {}).items()]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------------- one row


# A timed window in which torch.compile traced a graph (a batch layout first seen there: BERT's batches with and
# without a mask) is timed again, up to this many times: a trace costs a base-size model tens of seconds on a GPU.
MAX_RETIMES = 2


PROFILE_ROWS = 25  # operators kept per profiled row, the busiest first


def planned_steps(args) -> int:
    """Optimizer steps every row's schedule is planned for (the same for all rows, so their learning rates match):
    the warm-up, the timed window and its retimings, the profiled steps, one more."""
    return args.warmup_steps + (1 + MAX_RETIMES) * args.steps + args.profile_steps + 1


class Timer:
    """Times the steps after the warm-up between two synchronizations; keeps each step's loss as a device tensor
    (read once at the end: reading it every step would wait on the GPU). A window in which a graph was traced is
    timed again (MAX_RETIMES)."""

    def __init__(self, warmup: int, timed: int, device, profile_steps: int = 0):
        import torch

        self.torch, self.warmup, self.timed, self.device = torch, warmup, timed, device
        self.window = (warmup, warmup + timed)  # the timed steps: (after this one, up to and with this one)
        self.losses, self.start = [], None
        self.seconds = self.tokens = self.end_tokens = None
        self.start_graphs = self.graphs_while_timed = self.retimed = 0
        self.profile_steps, self.profile_end, self.profiler, self.profile = profile_steps, None, None, None
        self.created = time.perf_counter()

    def progress(self, step: int, what: str) -> None:
        """One line on stderr at the steps that mark a phase: a row stopped at the deadline says how far it got
        (compiling before step 1, the warm-up, the timed window, the profile)."""
        print(f"step {step}: {what} at {time.perf_counter() - self.created:.1f} s", file=sys.stderr, flush=True)

    def synchronize(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    def record_loss(self, step: int, loss) -> None:
        """Keeps the loss of step `step` when it is one of the timed window's (the last window's, after a retime)."""
        if self.window[0] < step <= self.window[1]:
            self.losses.append(loss)

    def step(self, step: int, tokens: int, loss=None) -> bool:
        """After optimizer step `step` (1-based) with `tokens` read so far; True once the timed steps (and the
        profiled ones after them) are done."""
        if loss is not None:
            self.record_loss(step, loss)
        if step in (1, 2):
            self.progress(step, "done (the first steps carry the compilation)")
        if self.profiler is not None:
            if step < self.profile_end:
                return False
            self.synchronize()
            self.profiler.stop()
            self.profile = busiest_operators(self.profiler, self.profile_steps, self.device)
            return True
        if step == self.warmup:
            self.synchronize()
            self.progress(step, "warm-up done, timing starts")
            self.start, self.start_tokens = time.perf_counter(), tokens
            self.start_graphs = traced_graphs()
        elif step == self.window[1]:
            self.synchronize()
            self.progress(step, "timed window done")
            self.seconds, self.tokens, self.end_tokens = time.perf_counter() - self.start, tokens - self.start_tokens, \
                tokens
            self.graphs_while_timed = traced_graphs() - self.start_graphs
            if self.graphs_while_timed and self.retimed < MAX_RETIMES:
                self.retimed += 1
                self.losses, self.window = [], (step, step + self.timed)
                self.start, self.start_tokens, self.start_graphs = time.perf_counter(), tokens, traced_graphs()
                return False
            if self.profile_steps:  # outside the timed window: the profiler's overhead does not count
                activities = [self.torch.profiler.ProfilerActivity.CPU]
                if self.device.type == "cuda":
                    activities.append(self.torch.profiler.ProfilerActivity.CUDA)
                self.profiler = self.torch.profiler.profile(activities=activities)
                self.profiler.start()
                self.profile_end = step + self.profile_steps
                return False
            return True
        return False

    def result(self, flops_per_token: float, peak: float | None) -> dict:
        tail = [float(loss) for loss in self.losses[-10:]]
        speed = self.tokens / self.seconds
        memory = self.torch.cuda.max_memory_allocated(self.device) / 2**30 if self.device.type == "cuda" else None
        return {"tokens_per_second": round(speed, 1), "seconds": round(self.seconds, 3), "timed_steps": self.timed,
                "mfu": round(speed * flops_per_token / peak, 4) if peak else None, "flops_per_token": flops_per_token,
                "peak_gib": round(memory, 2) if memory is not None else None, "loss": round(sum(tail) / len(tail), 4),
                "tokens": self.end_tokens, "compiled_graphs": traced_graphs(), "retimed": self.retimed,
                # still > 0 after the retimings: the row is not the steady state
                "graphs_traced_while_timed": self.graphs_while_timed,
                **({"profile": self.profile} if self.profile is not None else {})}


def busiest_operators(profiler, steps: int, device) -> list[dict]:
    """The PROFILE_ROWS operators that took the most self time a step (the device's on a GPU, else the CPU's):
    where a row's step goes, for the next optimisation to aim at."""
    def device_us(event) -> float:
        return float(getattr(event, "self_device_time_total", getattr(event, "self_cuda_time_total", 0.0)))

    events = list(profiler.key_averages())
    key = device_us if device.type == "cuda" else (lambda event: float(event.self_cpu_time_total))
    return [{"operator": event.key[:120], "calls_per_step": round(event.count / steps, 1),
             "self_device_ms_per_step": round(device_us(event) / steps / 1000, 3),
             "self_cpu_ms_per_step": round(float(event.self_cpu_time_total) / steps / 1000, 3)}
            for event in sorted(events, key=key, reverse=True)[:PROFILE_ROWS]]


def traced_graphs() -> int:
    """Graphs torch.compile has traced in this process so far."""
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"]


class _Measured(Exception):
    """Ends a measured run right after its last timed step (no final evaluation or export)."""


def measure_row(args) -> None:
    import torch

    from arabert_pipeline.training.logs import peak_flops

    kind, options = ROWS[args.name]
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    peak = args.peak_tflops * 1e12 if args.peak_tflops else \
        peak_flops(torch.cuda.get_device_name(device)) if device.type == "cuda" else None
    seq = options.get("max_seq_length", args.seq)
    if seq != args.seq:  # the seq-512 row keeps the tokens per step; at tiny size, 4 × --seq
        seq = seq if args.size == "base" else 4 * args.seq
    timer = Timer(args.warmup_steps, args.steps, device, args.profile_steps)
    folder = Path(args.folder)
    if kind == "package":
        flops = package_row(args, options, seq, folder, timer)
    else:
        flops = hf_row(args, options, seq, folder, timer, device)
    result = timer.result(flops, peak)
    result.update(kind=kind, options=options, seq=seq, batch=args.tokens_per_step // seq, size=args.size)
    Path(args.json).write_text(json.dumps(result), encoding="utf-8")


def package_row(args, options: dict, seq: int, folder: Path, timer: Timer) -> float:
    from arabert_pipeline.pretrain.config import PretrainConfig
    from arabert_pipeline.pretrain.trainer import Trainer

    plain = options.get("plain", False)
    config = PretrainConfig(
        tokenizer=str(folder / "tokenizer"), corpus=[str(folder / "corpus.txt")], output=str(Path(args.work) / "run"),
        model_size=args.size, architecture=options["architecture"], objective=options.get("objective", "mlm"),
        max_seq_length=seq, whole_word_masking=options.get("whole_word_masking", False),
        enhanced_mask_decoder=options.get("enhanced_mask_decoder", False),
        deberta_attention=options.get("deberta_attention", "eager"),
        batch_size=args.tokens_per_step // seq, steps=planned_steps(args), lr=5e-4, warmup=0.06,
        eval_sequences=16, eval_every=10**9, save_every=10**9, log_every=10, seed=42,
        cache_dir=str(folder / "cache"), progress=False,
        loader_workers=0 if plain else None,
        # Always given, so that a row means what its name says whatever the default; the CPU's smoke test: eager.
        compile=not plain and options.get("compile", True) and args.size != "tiny",
    )
    trainer = Trainer(config)

    def on_step(engine):
        if timer.step(engine.state.step, engine.state.tokens, engine.last_metrics["loss"]):
            raise _Measured

    trainer.on_step = on_step
    with contextlib.suppress(_Measured):  # on_step raises it once the timed steps are done
        trainer.train()
    return trainer.flops_per_token()


def hf_row(args, options: dict, seq: int, folder: Path, timer: Timer, device) -> float:
    """run_mlm.py's recipe: lines tokenized with their special tokens, concatenated, cut into blocks of `seq`."""
    from transformers import (
        BertConfig,
        BertForMaskedLM,
        DataCollatorForLanguageModeling,
        Trainer,
        TrainerCallback,
        TrainingArguments,
    )

    from arabert_pipeline.pretrain.config import bert_config_kwargs
    from arabert_pipeline.tokenizer.load import load_pretrained_tokenizer
    from arabert_pipeline.training.logs import transformer_flops_per_token
    from arabert_pipeline.training.optim import EMBEDDINGS

    tokenizer = load_pretrained_tokenizer(str(folder / "tokenizer"))
    lines = [line for line in (folder / "corpus.txt").read_text(encoding="utf-8").splitlines() if line.strip()]
    ids = [token for row in tokenizer(lines)["input_ids"] for token in row]
    blocks = [{"input_ids": ids[i : i + seq]} for i in range(0, len(ids) - seq + 1, seq)]
    model = BertForMaskedLM(BertConfig(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
                                       **bert_config_kwargs(args.size)))
    cuda = device.type == "cuda"
    training = TrainingArguments(
        output_dir=str(Path(args.work) / "hf"), per_device_train_batch_size=args.tokens_per_step // seq,
        max_steps=planned_steps(args), learning_rate=5e-4, warmup_steps=0.06, weight_decay=0.01,
        adam_epsilon=1e-6, bf16=cuda, use_cpu=not cuda, logging_steps=10, save_strategy="no", report_to="none",
        dataloader_num_workers=options["workers"], seed=42, disable_tqdm=True,
    )

    class Timing(TrainerCallback):
        def on_step_end(self, _args, state, control, **kwargs):
            if timer.step(state.global_step, state.global_step * (args.tokens_per_step // seq) * seq):
                control.should_training_stop = True

        def on_log(self, _args, state, control, logs=None, **kwargs):
            # The Trainer hands a callback no per-step loss: the timed window's come from its log rows (means over
            # ten steps, as the package's rows are taken over the last ten).
            if logs and "loss" in logs:
                timer.record_loss(state.global_step, logs["loss"])

    trainer = Trainer(model=model, args=training, train_dataset=blocks,
                      data_collator=DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15),
                      callbacks=[Timing()])
    trainer.train()
    timer.losses = timer.losses or [float("nan")]  # fewer timed steps than one log row (the CPU's smoke test)
    parameters = sum(p.numel() for name, p in model.named_parameters() if not EMBEDDINGS.search(f"model.{name}"))
    return transformer_flops_per_token(parameters, model.config.num_hidden_layers, model.config.hidden_size, seq)


# ------------------------------------------------------------------------------------------------------- CLI


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    p = sub.add_parser("prepare", help="here: the folder the GPU call carries")
    p.add_argument("folder")
    p.add_argument("--shard", default="saudinewsnet-000", help="a shard of the shared corpus (default %(default)s)")
    p.add_argument("--corpus", help="another raw corpus file (.txt or .txt.xz) instead of a shared shard")
    p.add_argument("--lines", type=int, default=22265, help="its first lines (default %(default)s, issue 51's)")
    p.add_argument("--tokenizer", default=str(REPO / "arabert_pipeline" / "models" / "arabert-mini"),
                   help="a directory with the tokenizer (default: the shipped model's 32k unigram)")
    p.set_defaults(func=prepare)

    def measured(p):
        p.add_argument("folder", help="what prepare wrote")
        p.add_argument("--size", default="base", help="model size for every row (default %(default)s)")
        p.add_argument("--seq", type=int, default=128, help="sequence length (the seq-512 row: 512)")
        p.add_argument("--tokens-per-step", type=int, default=32768)
        p.add_argument("--steps", type=int, default=50, help="timed optimizer steps per row")
        p.add_argument("--warmup-steps", type=int, default=15, help="untimed steps first (compilation included)")
        p.add_argument("--peak-tflops", type=float, help="the device's dense bf16 peak (default: by device name)")
        p.add_argument("--profile-steps", type=int, default=0,
                       help="after the timed steps, this many more under torch.profiler: the row's `profile`, its "
                            "busiest operators a step (default: none)")

    p = sub.add_parser("run", help="on the GPU: every row, each in a child process, then the JSON and a table")
    measured(p)
    p.add_argument("--out", required=True, help="the JSON report (rewritten after every row)")
    p.add_argument("--rows", help=f"comma-separated subset of: {', '.join(ROWS)}")
    p.add_argument("--deadline", type=float, default=330, help="seconds after which no row starts or goes on")
    p.set_defaults(func=run)
    p = sub.add_parser("row", help="one row (what run starts in a child process)")
    p.add_argument("name", choices=list(ROWS))
    measured(p)
    p.add_argument("--json", required=True)
    p.add_argument("--work", required=True)
    p.set_defaults(func=measure_row)
    args = parser.parse_args(argv)
    args.func(args)


if __name__ == "__main__":
    main()
