"""The paper's fine-tuning protocol on one GPU (issue 51, item 4): `scripts/paper_table6.sh`'s dry run at BERT-base
stand-in size, timed, and the real protocol's hours projected from it.

Two steps, as benchmarks/bench_pretrain_gpu.py, because a lent GPU machine is bare, offline and reached through a
64 MiB copy:

    # here, on the CPU: a self-contained folder (≤ 40 MiB): this script (and bench_pretrain_gpu.py, whose helpers it
    # uses), the package without its shipped models, the scripts the dry run calls, the shared data it reads (XQuAD-ar,
    # ARCD-train, ARCD-test, whole), the stand-ins' vocabularies, and the wheels the GPU image lacks (Farasa's port,
    # camel-tools, emoji, six: `pip download --no-deps --only-binary=:all:`, the versions installed here)
    python benchmarks/bench_finetune_gpu.py prepare runs/gpu-finetune-bench
    # on the GPU machine, one command of ≤ 4 minutes (carry runs/gpu-finetune-bench); the JSON comes back
    python runs/gpu-finetune-bench/bench_finetune_gpu.py run runs/gpu-finetune-bench \\
        --out "$OUT/bench_finetune_gpu.json"

`run` installs the wheels into a temporary `--target` directory (on PYTHONPATH, after anything the machine has), then
runs `DRY_RUN=1 scripts/paper_table6.sh` with STANDIN_SIZE=base, SYSTEMS="arabertv2 mbert", BATCH=MICRO_BATCH=32
windows of SEQ=384, every article of every set (DRY_ARTICLES: ARCD-test's 702 questions; XQuAD-ar standing in for
Arabic-SQuAD plus ARCD-train give ~1,930 / 2,080 windows an epoch, so --max-steps 60 stays inside the first epoch and
no epoch checkpoint falls among the timed steps), one seed, evaluate with the protocol's 10,000 resamples, stopping
it at --deadline seconds from the start. Each line the dry run prints is time-stamped (kept in FILE.log beside the
JSON); from them and from each fine-tuning's log.jsonl (a row every 20 optimizer steps: elapsed, tokens/s,
peak_cuda_gib; training/logs.py):
- per system: seconds per optimizer step in the steady state (between the first and the last log row: the first 20
  steps, CUDA's warm-up, are excluded; a row's elapsed is taken before the GPU's queue drains, so the difference of
  two is exact to within a step), tokens/s, peak GPU memory (the allocator's high-water mark), windows per epoch, and
  the fine-tuning's wall time split into setup (reading, preprocessing, windows), training, and the rest (model
  load, saving, predicting ARCD-test);
- the evaluate step's seconds (both models and the lexical baselines on ARCD-test, bootstrap CIs, paired tests);
- the projection of the real protocol (Arabic-SQuAD + ARCD-train, --epochs 2, ≈ 53k windows an epoch for AraBERTv2,
  57k for mBERT: --real-windows; 32 windows a step): steps = epochs × ⌈windows / 32⌉, training hours = steps ×
  seconds per step; `hours` adds the setup scaled by windows (its fixed part too: high) and the rest as measured,
  `hours_low` the setup as measured (`formula` in the JSON).

The CPU runs it at tiny size (tests/test_bench_finetune_gpu.py): `prepare DIR --no-wheels` and
`run DIR --size tiny --max-steps 22 --batch 2 --micro-batch 2 --articles 2 --resamples 100`.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import importlib.util
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))  # in the repository: benchmarks/; in the prepared folder: the folder itself
from bench_pretrain_gpu import SHARED, check_folder_size, copy_package, write_json  # noqa: E402  after the sys.path entry above

SCRIPT = "paper_table6.sh"
# paper_table6.sh's system names → the hub id its stand-in is built as (scripts/hub_standins.py's ids)
SYSTEM_REPOS = {"mbert": "bert-base-multilingual-cased", "arabertv01": "aubmindlab/bert-base-arabertv01",
                "arabertv1": "aubmindlab/bert-base-arabert", "arabertv02": "aubmindlab/bert-base-arabertv02",
                "arabertv2": "aubmindlab/bert-base-arabertv2"}
LABELS = {"mbert": "mBERT", "arabertv01": "AraBERTv0.1", "arabertv1": "AraBERTv1", "arabertv02": "AraBERTv0.2",
          "arabertv2": "AraBERTv2"}  # paper_table6.sh's label_of
# What the dry run imports and the GPU image lacks (pure Python; six for camel-tools' charmap), as distributions.
WHEELS = ("Farasa", "camel-tools", "emoji", "six")
REAL_WINDOWS = {"arabertv2": 53_000, "mbert": 57_000}  # issue 51: windows an epoch of Arabic-SQuAD + ARCD-train


# ------------------------------------------------------------------------------------------------------- prepare


def prepare(args) -> None:
    standins = load_standins(REPO / "scripts")
    systems = args.systems.split()
    unknown = [s for s in systems if s not in SYSTEM_REPOS]
    if unknown:
        sys.exit(f"--systems: unknown {', '.join(unknown)} ({', '.join(SYSTEM_REPOS)})")
    folder, shared = Path(args.folder), Path(args.data)
    if folder.exists() and any(folder.iterdir()):
        sys.exit(f"{folder} is not empty: give a new folder")
    folder.mkdir(parents=True, exist_ok=True)
    for script in (Path(__file__), HERE / "bench_pretrain_gpu.py"):
        shutil.copy(script, folder / script.name)
    copy_package(folder)
    # The scripts the dry run calls, as it names them ("$here/scripts/NAME"), beside the package: here = folder/src.
    text = (REPO / "scripts" / SCRIPT).read_text(encoding="utf-8")
    (folder / "src" / "scripts").mkdir()
    for name in [SCRIPT, *sorted(set(re.findall(r'\$here/scripts/([\w.-]+)', text)))]:
        shutil.copy(REPO / "scripts" / name, folder / "src" / "scripts" / name)
    # The shared data the dry run reads: the sets hub_standins.py --data-slices cuts, the systems' vocabularies.
    (folder / "data" / "qa").mkdir(parents=True)
    for source in standins.DATA_SLICES.values():
        shutil.copy(shared / "qa" / source, folder / "data" / "qa" / source)
    (folder / "data" / "vocab").mkdir()
    for system in systems:
        vocab = standins.vocabulary_file(SYSTEM_REPOS[system], shared / "vocab")
        shutil.copy(vocab, folder / "data" / "vocab" / vocab.name)
    wheels = []
    if not args.no_wheels:
        wheels = download_wheels(folder / "wheels", args.wheels_from)
    manifest = {"systems": systems, "data": str(shared), "wheels": wheels,
                "prepared": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())}
    write_json(folder / "prepared.json", manifest)
    size = check_folder_size(folder, "fewer --systems, or --no-wheels if the GPU image has them")
    for path in sorted(folder.iterdir()):
        part = sum(p.stat().st_size for p in ([path] if path.is_file() else path.rglob("*")) if p.is_file())
        print(f"  {path.name}: {part / 2**20:.1f} MiB")
    print(f"{size / 2**20:.1f} MiB in all; wheels: {', '.join(wheels) or 'none'}")


def load_standins(scripts: Path):
    spec = importlib.util.spec_from_file_location("hub_standins", scripts / "hub_standins.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def download_wheels(target: Path, source: str | None) -> list[str]:
    """The wheels of WHEELS at the versions installed here: copied from `source` (a folder of wheels) when given,
    else `pip download --no-deps --only-binary=:all:` (needs the network or a local index)."""
    pins = [f"{name}=={importlib.metadata.version(name)}" for name in WHEELS]
    target.mkdir()
    if source:
        for pin in pins:
            name, version = pin.split("==")
            stem = re.sub(r"[-_.]+", "_", name).lower()
            found = [w for w in Path(source).glob("*.whl") if w.name.lower().startswith(f"{stem}-{version}-")]
            if not found:
                sys.exit(f"--wheels-from {source}: no wheel of {pin}")
            shutil.copy(found[0], target / found[0].name)
    else:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "-d",
                        str(target), *pins], check=True)
    return sorted(w.name for w in target.glob("*.whl"))


# ------------------------------------------------------------------------------------------------------- run


def run(args) -> None:
    started = time.monotonic()
    folder, out = Path(args.folder).resolve(), Path(args.out).resolve()
    manifest = json.loads((folder / "prepared.json").read_text(encoding="utf-8"))
    systems = args.systems.split() if args.systems else manifest["systems"]
    missing = [s for s in systems if s not in manifest["systems"]]
    if missing:
        sys.exit(f"--systems: {', '.join(missing)} not prepared (the folder has {', '.join(manifest['systems'])})")
    work = Path(tempfile.mkdtemp(prefix="bench-finetune-gpu-"))
    report = {"device": None, "settings": {k: v for k, v in vars(args).items() if k not in ("func", "out")},
              "systems": {}, "evaluate": None, "projection": None}
    report["settings"]["systems"] = systems
    report.update(device_info())
    print(f"{report['device']}, torch {report['torch']}, transformers {report['transformers']}", flush=True)
    site = install_wheels(folder / "wheels", work / "site", report)
    write_json(out, report)  # something comes back even if the call is cut short
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(folder / "src"), os.environ.get(
               "PYTHONPATH", ""), site) if p),
           "PYTHON": sys.executable, "PYTHONUNBUFFERED": "1", "DRY_RUN": "1",
           "ARABERT_PIPELINE_DATA": str(folder / "data"), "STANDIN_SIZE": args.size, "SYSTEMS": " ".join(systems),
           "DRY_ARTICLES": str(args.articles), "BATCH": str(args.batch), "MICRO_BATCH": str(args.micro_batch),
           "SEQ": str(args.seq), "MAX_STEPS": str(args.max_steps), "SEEDS": "0", "RESAMPLES": str(args.resamples),
           "EPOCHS": str(args.epochs)}
    runs = work / "runs"
    log_file = out.with_suffix(".log")
    lines = run_dry(folder / "src" / "scripts" / SCRIPT, runs, env, log_file,
                    args.deadline - (time.monotonic() - started), report)
    for system in systems:
        report["systems"][system] = system_result(system, runs, lines, args)
    report["evaluate"] = evaluate_result(lines, runs, args)
    report["projection"] = projection(report, args)
    report["seconds"] = round(time.monotonic() - started, 1)
    write_json(out, report)
    shutil.rmtree(work, ignore_errors=True)
    print(summary(report))


def device_info() -> dict:
    import torch
    import transformers

    cuda = torch.cuda.is_available()
    return {"device": torch.cuda.get_device_name(0) if cuda else "cpu", "torch": torch.__version__,
            "cuda": torch.version.cuda, "transformers": transformers.__version__, "cpus": os.cpu_count()}


def install_wheels(wheels: Path, site: Path, report: dict) -> str:
    """DIR/wheels installed into `site` (pip --no-index --no-deps --target; unzipped where pip is missing): the
    directory to put on PYTHONPATH, after what the machine has ('' when there are none)."""
    found = sorted(wheels.glob("*.whl")) if wheels.is_dir() else []
    report["wheels"] = [w.name for w in found]
    if not found:
        return ""
    began = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                           "--no-cache-dir", "--disable-pip-version-check", "--target", str(site),
                           *map(str, found)], capture_output=True, text=True)
    if done.returncode != 0:  # a pure-Python wheel is a zip of its files: enough to import them
        print(f"pip install failed ({done.stderr.strip()[-300:]}); unzipping the wheels", flush=True)
        for wheel in found:
            with zipfile.ZipFile(wheel) as archive:
                archive.extractall(site)
    report["wheels_seconds"] = round(time.monotonic() - began, 1)
    return str(site)


def run_dry(script: Path, runs: Path, env: dict, log_file: Path, left: float, report: dict) -> list[tuple]:
    """The dry run, its output lines time-stamped (seconds since it started) into `log_file` as they come; stopped
    (its whole process group) when `left` seconds are spent. Returns [(seconds, line)]."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    lines, began = [], time.monotonic()
    process = subprocess.Popen(["bash", str(script), str(runs)], env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, errors="replace", start_new_session=True)
    deadline_hit = False

    def stop(*_):
        nonlocal deadline_hit
        deadline_hit = True
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)

    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, max(left, 1.0))
    try:
        with open(log_file, "w", encoding="utf-8") as log:
            for line in process.stdout:
                # tqdm's carriage returns (e.g. "Writing model shards") end at the last state
                line = line.rstrip("\n").split("\r")[-1]
                stamp = round(time.monotonic() - began, 2)
                lines.append((stamp, line))
                log.write(f"{stamp:8.2f} {line}\n")
                log.flush()
        process.wait()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    report["dry_run"] = {"returncode": process.returncode, "seconds": round(time.monotonic() - began, 1),
                         "stopped_at_deadline": deadline_hit}
    if process.returncode != 0:
        report["dry_run"]["tail"] = "\n".join(line for _, line in lines[-40:])
        print(f"the dry run {'was stopped at the deadline' if deadline_hit else f'exited {process.returncode}'}:\n"
              + report["dry_run"]["tail"], flush=True)
    return lines


def first(lines: list[tuple], pattern: str, after: float = -1.0):
    """The first (seconds, match) whose line matches `pattern` at or after `after` seconds, else (None, None)."""
    regex = re.compile(pattern)
    for stamp, line in lines:
        if stamp >= after:
            match = regex.search(line)
            if match:
                return stamp, match
    return None, None


def system_result(system: str, runs: Path, lines: list[tuple], args) -> dict:
    label = f"{LABELS[system]}-s0"
    result: dict = {"label": label}
    start, _ = first(lines, rf"^== {re.escape(label)}: fine-tuning")
    if start is None:
        return {**result, "error": "not started (see the log)"}
    after, _ = first(lines, r"^== ", start + 1e-9)
    if after is None:  # the last line of this fine-tuning: the next step's marker, else the log's end
        after = next((s for s, line in reversed(lines) if not line.startswith("== ")), start)
    windows_at, windows = first(lines, r"training on (\d+) questions → (\d+) windows", start)
    if windows_at is not None and windows_at <= after:
        result.update(questions=int(windows[1]), windows_per_epoch=int(windows[2]),
                      setup_seconds=round(windows_at - start, 1))
    result["finetune_seconds"] = round(after - start, 1)
    run_dir = runs / "paper-table6" / f"{system}-s0"
    rows = []
    if (run_dir / "log.jsonl").exists():
        rows = [json.loads(line) for line in (run_dir / "log.jsonl").read_text(encoding="utf-8").splitlines()
                if line.strip()]
    rows = [row for row in rows if "elapsed" in row]  # training rows (evaluation rows carry no elapsed)
    result["log_rows"] = rows
    result["finished"] = (run_dir / "arabert_pipeline.json").exists()
    if not rows:
        return {**result, "error": "no log row (see the log)"}
    last = rows[-1]
    result.update(steps=last["step"], train_seconds=last["elapsed"], peak_cuda_gib=last.get("peak_cuda_gib"),
                  peak_rss_gib=last.get("peak_rss_gib"))
    if "setup_seconds" in result and result["finished"]:
        result["rest_seconds"] = round(result["finetune_seconds"] - result["setup_seconds"] - last["elapsed"], 1)
    if len(rows) >= 2:
        head = rows[0]
        steps, seconds = last["step"] - head["step"], last["elapsed"] - head["elapsed"]
        result.update(warmup_steps_excluded=head["step"], steady_steps=steps,
                      seconds_per_step=round(seconds / steps, 4) if seconds > 0 else None,
                      tokens_per_second=round((last["tokens"] - head["tokens"]) / seconds, 1) if seconds > 0 else None,
                      windows_per_second=round(steps * args.batch / seconds, 1) if seconds > 0 else None)
    else:
        result["seconds_per_step"] = None
        result["note"] = f"one log row only (rows every 20 steps): no steady state; {last['step']} steps took " \
                         f"{last['elapsed']} s, warm-up included"
    return result


def evaluate_result(lines: list[tuple], runs: Path, args) -> dict | None:
    start, match = first(lines, r"^== evaluate on (\S+) \((\w+)\)")
    if start is None:
        return None
    result = {"data": match[1], "device": match[2], "resamples": args.resamples}
    end, _ = first(lines, r"^report: .*table\.md$", start)  # evaluate's own last line
    if end is not None:
        result["seconds"] = round(end - start, 1)
    results = runs / "report" / "results.json"
    if results.exists():
        data = json.loads(results.read_text(encoding="utf-8"))
        result["models"] = [s["label"] for s in data.get("systems", []) if s.get("kind") == "model"]
        result["baselines"] = [s["label"] for s in data.get("systems", []) if s.get("kind") == "baseline"]
    questions = [int(m[1]) for _, line in lines if (m := re.search(r"\(model, (\d+) questions\)", line))]
    if questions:
        result["questions"] = questions[0]
    return result


def projection(report: dict, args) -> dict:
    """The real protocol's hours per system and seed, from the measured steady state (see the docstring)."""
    real = dict(REAL_WINDOWS)
    for item in args.real_windows.split(",") if args.real_windows else []:
        name, _, count = item.partition("=")
        real[name.strip()] = int(count)
    out = {"formula": "steps = epochs × ceil(windows / batch); training_hours = steps × seconds_per_step / 3600; "
                      "hours = training_hours + (setup_seconds × windows / dry windows_per_epoch + rest_seconds) "
                      "/ 3600 (rest: model load, saves, predicting ARCD-test; the setup's fixed part, imports, is "
                      "scaled too, so this is high); hours_low: the setup not scaled. The evaluate step comes once, "
                      "after every fine-tuning",
           "epochs": args.epochs, "batch": args.batch, "systems": {}}
    for system, measured in report["systems"].items():
        rate = measured.get("seconds_per_step")
        if system not in real or not rate:
            continue
        windows = real[system]
        steps = args.epochs * math.ceil(windows / args.batch)
        entry = {"windows_per_epoch": windows, "steps": steps, "seconds_per_step": rate,
                 "training_hours": round(steps * rate / 3600, 3)}
        if measured.get("setup_seconds") is not None and measured.get("windows_per_epoch"):
            setup, rest = measured["setup_seconds"], measured.get("rest_seconds") or 0
            scaled = setup * windows / measured["windows_per_epoch"]
            entry["setup_hours"] = round(scaled / 3600, 3)
            entry["hours"] = round(entry["training_hours"] + (scaled + rest) / 3600, 3)
            entry["hours_low"] = round(entry["training_hours"] + (setup + rest) / 3600, 3)
        out["systems"][system] = entry
    evaluate = report.get("evaluate") or {}
    if evaluate.get("seconds") is not None:
        out["evaluate_hours"] = round(evaluate["seconds"] / 3600, 4)
    return out


def summary(report: dict) -> str:
    lines = [f"\n{report['device']} (torch {report['torch']}, transformers {report['transformers']})", "",
             "| system | windows/epoch | s/step (steady) | tokens/s | peak GPU GiB "
             "| fine-tune s (setup / train / rest) | projected h |", "|---|---:|---:|---:|---:|---|---:|"]
    for system, row in report["systems"].items():
        if "error" in row:
            lines.append(f"| {system} | {row['error']} | | | | | |")
            continue
        hours = report["projection"]["systems"].get(system, {})
        lines.append(f"| {system} | {row.get('windows_per_epoch')} | {row.get('seconds_per_step')} | "
                     f"{row.get('tokens_per_second')} | {row.get('peak_cuda_gib')} | {row.get('finetune_seconds')} "
                     f"({row.get('setup_seconds')} / {row.get('train_seconds')} / {row.get('rest_seconds')}) | "
                     f"{hours.get('hours', hours.get('training_hours'))} |")
    evaluate = report.get("evaluate") or {}
    lines.append(f"\nevaluate: {evaluate.get('seconds')} s ({evaluate.get('models')}, "
                 f"{evaluate.get('questions')} questions, {evaluate.get('resamples')} resamples)")
    lines.append(f"dry run: {report.get('dry_run')}".replace("\n", " ")[:400])
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------------- CLI


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    p = sub.add_parser("prepare", help="here: the folder the GPU call carries")
    p.add_argument("folder")
    p.add_argument("--data", default=str(SHARED), help="the shared data (qa/, vocab/; default %(default)s)")
    p.add_argument("--systems", default="arabertv2 mbert", help="paper_table6.sh's systems (default %(default)s)")
    p.add_argument("--no-wheels", action="store_true", help="carry no wheels (a machine that has the packages)")
    p.add_argument("--wheels-from", help="a folder holding the wheels already (else pip download)")
    p.set_defaults(func=prepare)
    p = sub.add_parser("run", help="on the GPU: the dry run, timed; the JSON")
    p.add_argument("folder", help="what prepare wrote")
    p.add_argument("--out", required=True, help="the JSON report (the time-stamped log beside it, .log)")
    p.add_argument("--systems", help="a subset of the prepared systems (default: all of them)")
    p.add_argument("--size", default="base", help="STANDIN_SIZE (default %(default)s)")
    p.add_argument("--max-steps", type=int, default=60,
                   help="optimizer steps per fine-tuning (default %(default)s: log rows at 20, 40, 60)")
    p.add_argument("--batch", type=int, default=32, help="windows per optimizer step (default %(default)s)")
    p.add_argument("--micro-batch", type=int, default=32, help="windows per forward pass (default %(default)s)")
    p.add_argument("--seq", type=int, default=384)
    p.add_argument("--articles", type=int, default=1000, help="DRY_ARTICLES (default %(default)s: every article)")
    p.add_argument("--resamples", type=int, default=10000, help="evaluate's bootstrap (default: the protocol's)")
    p.add_argument("--epochs", type=int, default=2, help="the protocol's epochs (default %(default)s)")
    p.add_argument("--real-windows", help="windows an epoch of the real protocol, e.g. arabertv2=53000,mbert=57000")
    p.add_argument("--deadline", type=float, default=220, help="seconds after which the dry run is stopped")
    p.set_defaults(func=run)
    args = parser.parse_args(argv)
    args.func(args)


if __name__ == "__main__":
    main()
