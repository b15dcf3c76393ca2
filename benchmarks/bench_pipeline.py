"""`Pipeline.answer` against Hugging Face's `pipeline("question-answering")` on the same model and ARCD-test questions.

    python benchmarks/bench_pipeline.py                                   # the shipped model (arabert-mini)
    python benchmarks/bench_pipeline.py --model runs/qa/mini --latency-questions 300
    python benchmarks/bench_pipeline.py --random-init                     # a random-init model built in a temp dir

Reported, all measured in this one run, for our ONNX Runtime backend (the default wherever a model.onnx exists), our
torch backend and the int8 ONNX variant:
- cold start: `arabert-pipeline answer --question Q --context C` in a new process, from its start to its exit after
  printing the answer (median of --cold-runs), with the process's peak RSS; the reference's is a new python that
  imports transformers, builds its QA pipeline on the model and answers the same question;
- latency p50/p95 at batch 1 (each question answered by every system in turn, so machine load hits them alike),
  throughput at batch 32 (best of --rounds, systems alternating), and their ratios to Hugging Face's;
- answers identical to the torch backend's and to Hugging Face's (same character span of the original context), and
  EM/F1 of every system (Arabic-correct and SOQAL metrics): the int8 variant is only worth using if F1 holds.
A model dir without model.onnx is exported into a temporary copy first.

Settings aligned on both sides: max_seq_len / doc_stride / max_question_len / max_answer_len are the model's own
(arabert_pipeline.json; project defaults 384 / 128 / 64 / 30, Hugging Face's pipeline defaults to max_answer_len 15),
align_to_words off (our spans are token spans, as in run_qa), top_k 1, the same thread count (torch threads, ONNX
Runtime intra-op threads through OMP_NUM_THREADS).
Hugging Face's pipeline sees text: it is given the questions and contexts ALREADY preprocessed with the model's
preprocessing, outside its timed region; `Pipeline.answer` gets the raw text and its timing includes preprocessing.
Its answers are mapped back to the original context through the same offset map before they are compared.

transformers 5 removed the question-answering pipeline. The reference then runs in a child process from a separate
venv with transformers 4.x (benchmarks/transformers4_env.py, made on first use); the child times its own calls, so
the pipe between the processes is not counted. Run by hand, not in CI.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "arabert_pipeline" / "models" / "arabert-mini"


# The reference worker: runs in the transformers-4 venv, imports nothing from this package ------------------------

def reference_worker() -> None:
    """Answer JSON-line requests on stdin with HF's QA pipeline; every reply carries the time of the call alone."""
    import torch
    import transformers

    request = json.loads(sys.stdin.readline())
    torch.set_num_threads(request["threads"])
    transformers.logging.set_verbosity_error()
    qa = transformers.pipeline("question-answering", model=request["model"], tokenizer=request["model"], device=-1)
    options = request["options"]
    _reply({"transformers": transformers.__version__})
    for line in sys.stdin:
        request = json.loads(line)
        start = time.perf_counter()
        if request["op"] == "one":
            out = qa(question=request["question"], context=request["context"], **options)
            answers = [out]
        else:
            out = qa(question=request["questions"], context=request["contexts"], batch_size=request["batch_size"],
                     **options)
            answers = out if isinstance(out, list) else [out]
        seconds = time.perf_counter() - start
        _reply({"seconds": seconds, "answers": [[a["start"], a["end"], a["answer"], a["score"]] for a in answers]})


def _reply(message: dict) -> None:
    sys.stdout.write(json.dumps(message, ensure_ascii=False) + "\n")
    sys.stdout.flush()


# The benchmark ------------------------------------------------------------------------------------------------------

class Reference:
    """The HF pipeline in a child process."""

    def __init__(self, python: str, model: Path, threads: int, options: dict):
        self.process = subprocess.Popen([python, __file__, "--worker"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        text=True, encoding="utf-8", bufsize=1)
        self.version = self.call({"model": str(model), "threads": threads, "options": options})["transformers"]

    def call(self, request: dict) -> dict:
        self.process.stdin.write(json.dumps(request, ensure_ascii=False) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise SystemExit("the Hugging Face reference worker died (see its error above)")
        return json.loads(line)

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=60)


def reference_python(given: str | None) -> str:
    """A Python whose transformers still has the question-answering pipeline (the current one if it does)."""
    if given:
        return given
    import transformers

    if int(transformers.__version__.split(".")[0]) < 5:
        return sys.executable
    sys.path.insert(0, str(Path(__file__).parent))
    from transformers4_env import transformers4_python

    return transformers4_python()


def build_random_model(directory: Path, examples: list[dict], preprocessing: str, layers: int, hidden: int,
                       vocab_size: int, seed: int) -> Path:
    """A random-init BERT QA model with a WordPiece vocab trained on the preprocessed ARCD-test contexts."""
    import torch
    from tokenizers import BertWordPieceTokenizer
    from transformers import BertConfig, BertForQuestionAnswering, BertTokenizerFast

    from arabert_pipeline import Preprocessor
    from arabert_pipeline.artifacts.metadata import write_metadata
    from arabert_pipeline.tokenizer.export import save_pretrained_tokenizer

    texts = Preprocessor(preprocessing).preprocess_batch(sorted({e["context"] for e in examples}))
    wordpiece = BertWordPieceTokenizer(lowercase=False, strip_accents=False)
    wordpiece.train_from_iterator(texts, vocab_size=vocab_size, show_progress=False)
    directory.mkdir(parents=True, exist_ok=True)
    wordpiece.save_model(str(directory))
    tokenizer = BertTokenizerFast(vocab=str(directory / "vocab.txt"), do_lower_case=False, strip_accents=False)
    save_pretrained_tokenizer(tokenizer, directory)
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=hidden, num_hidden_layers=layers,
                        num_attention_heads=max(1, hidden // 64), intermediate_size=4 * hidden,
                        max_position_embeddings=512)
    BertForQuestionAnswering(config).save_pretrained(directory)
    write_metadata(directory, preprocessing=preprocessing)
    return directory


def percentile(values: list[float], q: float) -> float:
    import numpy as np

    return float(np.percentile(np.asarray(values), q))


def scores(examples: list[dict], spans: list[tuple[int, int] | None]) -> dict:
    from arabert_pipeline.evaluate.metrics import score_question

    per = [score_question(e, None if s is None else e["context"][s[0]:s[1]], None if s is None else s[0])
           for e, s in zip(examples, spans, strict=True)]
    return {key: 100 * sum(p[key] for p in per) / len(per) for key in ("arabic_em", "arabic_f1", "soqal_f1")}


# Cold start -------------------------------------------------------------------------------------------------------

COLD_QUESTION = "ما هي عاصمة الأردن؟"
COLD_CONTEXT = "عمّان هي عاصمة المملكة الأردنية الهاشمية وأكبر مدنها."
# The reference's "answer command": a new python, transformers' QA pipeline on the model, one answer.
HF_COLD = ("import sys, transformers; transformers.logging.set_verbosity_error(); "
           "qa = transformers.pipeline('question-answering', model=sys.argv[1], tokenizer=sys.argv[1], device=-1); "
           "print(qa(question=sys.argv[2], context=sys.argv[3]))")


def answer_command(model_dir: Path, *extra: str) -> list[str]:
    """`arabert-pipeline answer` as a user runs it: the console script of this venv."""
    script = Path(sys.executable).with_name("arabert-pipeline")
    prefix = [str(script)] if script.exists() else [sys.executable, "-m", "arabert_pipeline.cli"]
    return [*prefix, "answer", "--model", str(model_dir), "--question", COLD_QUESTION, "--context", COLD_CONTEXT,
            *extra]


# Runs one command and reports its wall time and peak RSS. A small launcher process of its own: a child forked from
# this benchmark would count the benchmark's own resident pages (GBs of models) in its peak RSS.
_LAUNCHER = ("import json, os, subprocess, sys, time; start = time.perf_counter(); "
             "child = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL); "
             "_, status, usage = os.wait4(child.pid, 0); "
             "print(json.dumps([time.perf_counter() - start, os.waitstatus_to_exitcode(status), usage.ru_maxrss]))")


def run_cold(command: list[str], env: dict) -> tuple[float, float]:
    """(seconds from process start to exit, peak RSS in MB) of one fresh process, which must succeed."""
    done = subprocess.run([sys.executable, "-c", _LAUNCHER, *command], capture_output=True, text=True, env=env)
    seconds, status, rss_kb = json.loads(done.stdout.strip().splitlines()[-1])
    if status != 0:
        raise SystemExit(f"{' '.join(command[:3])} failed:\n{done.stderr[-3000:]}")
    return seconds, rss_kb / 1024


def cold_starts(commands: dict[str, list[str]], env: dict, runs: int) -> dict:
    """Median seconds and peak RSS per command, the commands alternating so that machine load hits them alike."""
    measured = {name: [] for name in commands}
    for _ in range(runs):
        for name, command in commands.items():
            measured[name].append(run_cold(command, env))
    return {name: {"cold_start_s": percentile([t for t, _ in samples], 50),
                   "cold_start_max_s": max(t for t, _ in samples),
                   "peak_rss_mb": max(r for _, r in samples)} for name, samples in measured.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--model", default=str(SHIPPED), help="QA model dir (default: the shipped model)")
    parser.add_argument("--random-init", action="store_true", help="build a random-init model in a temp dir instead")
    parser.add_argument("--preprocessing", default="arabertv02", help="of the random-init model")
    parser.add_argument("--layers", type=int, default=4, help="of the random-init model")
    parser.add_argument("--hidden", type=int, default=256, help="of the random-init model")
    parser.add_argument("--vocab-size", type=int, default=16000, help="of the random-init model")
    parser.add_argument("--dataset", default="arcd-test")
    parser.add_argument("--latency-questions", type=int, default=200, help="first N questions, answered one by one")
    parser.add_argument("--throughput-questions", type=int, default=0, help="first N questions at batch 32 (0: all)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2, help="throughput rounds per system (best kept)")
    parser.add_argument("--cold-runs", type=int, default=5, help="fresh processes per system for the cold start")
    parser.add_argument("--threads", type=int, nargs="+", default=[1],
                        help="torch / ONNX Runtime threads, all systems; several (e.g. 1 2): one child run each, then "
                             "their speed-ups side by side")
    parser.add_argument("--no-quantize", action="store_true", help="skip the int8 variant")
    parser.add_argument("--reference-python", help="a python with transformers<5 (default: a venv made on demand)")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.worker:
        reference_worker()
        return

    if len(args.threads) > 1:
        by_threads(args)
        return
    args.threads = args.threads[0]
    # Before any session or torch pool exists: ONNX Runtime's sessions and the child processes read it.
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    sys.path.insert(0, str(REPO))
    import torch
    from transformers.utils import logging as hf_logging

    from arabert_pipeline import Pipeline
    from arabert_pipeline.finetuning.export import ONNX_FILE
    from arabert_pipeline.qa.align import QAPreprocessing
    from arabert_pipeline.qa.data import read_squad
    from arabert_pipeline.qa.transformer.export import export_onnx

    torch.set_num_threads(args.threads)
    hf_logging.disable_progress_bar()
    examples = read_squad(args.dataset, misaligned="keep").examples
    throughput_examples = examples[: args.throughput_questions or len(examples)]
    latency_examples = examples[: args.latency_questions]
    temp = tempfile.TemporaryDirectory(prefix="bench-pipeline-")
    if args.random_init:
        model_dir = build_random_model(Path(temp.name) / "model", examples, args.preprocessing, args.layers,
                                       args.hidden, args.vocab_size, args.seed)
        model_note = (f"RANDOM-INIT BERT L{args.layers}/H{args.hidden}, WordPiece {args.vocab_size} on ARCD-test "
                      f"contexts, preprocessing {args.preprocessing!r}: speed is meaningful, F1 is not")
    else:
        model_dir, model_note = Path(args.model), f"trained model {args.model}"
        if not (model_dir / ONNX_FILE).is_file():
            model_dir = Path(shutil.copytree(model_dir, Path(temp.name) / "model"))
    if not (model_dir / ONNX_FILE).is_file():
        export_onnx(model_dir)
        model_note += " (exported to ONNX for this run)"
    reference_py = reference_python(args.reference_python)

    # Spans as decoded, not widened to words: the reference runs with align_to_words=False, so answers compare.
    systems = {"onnx": Pipeline(model_dir, batch_size=args.batch_size, whole_words=False, quantize=False),
               "torch": Pipeline(model_dir, batch_size=args.batch_size, whole_words=False, backend="torch")}
    assert systems["onnx"].backend == "onnx"
    if not args.no_quantize:
        systems["onnx-int8"] = Pipeline(model_dir, batch_size=args.batch_size, quantize=True, whole_words=False)
    settings = systems["onnx"].qa.settings
    options = {"top_k": 1, "max_seq_len": settings.max_seq_length, "doc_stride": settings.doc_stride,
               "max_question_len": settings.max_question_tokens, "max_answer_len": settings.max_answer_tokens,
               "align_to_words": False, "handle_impossible_answer": False}
    preprocessing = QAPreprocessing(systems["onnx"].preprocessing)
    aligned = {e["context"]: preprocessing.context(e["context"]) for e in examples}
    pre_questions = {e["id"]: preprocessing.question(e["question"]) for e in examples}

    cold = cold_starts({"onnx": answer_command(model_dir), "torch": answer_command(model_dir, "--backend", "torch"),
                        "hf": [reference_py, "-c", HF_COLD, str(model_dir), preprocessing.question(COLD_QUESTION),
                               preprocessing.context(COLD_CONTEXT).text]},
                       dict(os.environ), args.cold_runs)
    reference = Reference(reference_py, model_dir, args.threads, options)

    def hf_spans(found: list, batch: list[dict]) -> list[tuple[int, int] | None]:
        out = []
        for (start, end, _text, _), e in zip(found, batch, strict=True):
            span = aligned[e["context"]].to_original(start, end) if end > start else None
            out.append(span if span and span[1] > span[0] else None)
        return out

    def hf_request(batch: list[dict], op: str) -> dict:
        if op == "one":
            return {"op": "one", "question": pre_questions[batch[0]["id"]],
                    "context": aligned[batch[0]["context"]].text}
        return {"op": "batch", "questions": [pre_questions[e["id"]] for e in batch],
                "contexts": [aligned[e["context"]].text for e in batch], "batch_size": args.batch_size}

    def ours_spans(found) -> list[tuple[int, int] | None]:
        return [None if a is None else (a.start, a.end) for a in found]

    # Warm-up: first calls allocate, build caches and pack weights.
    for e in latency_examples[:5]:
        for pipe in systems.values():
            pipe.answer(e["question"], e["context"])
        reference.call(hf_request([e], "one"))

    latency = {name: [] for name in [*systems, "hf"]}
    answers_one = {name: [] for name in [*systems, "hf"]}
    for e in latency_examples:
        for name, pipe in systems.items():
            start = time.perf_counter()
            found = pipe.answer(e["question"], e["context"])
            latency[name].append(time.perf_counter() - start)
            answers_one[name].extend(ours_spans([found]))
        reply = reference.call(hf_request([e], "one"))
        latency["hf"].append(reply["seconds"])
        answers_one["hf"].extend(hf_spans(reply["answers"], [e]))

    throughput = {name: [] for name in [*systems, "hf"]}
    answers_batch = {}
    for _ in range(args.rounds):
        for name, pipe in systems.items():
            start = time.perf_counter()
            found = pipe.answer([e["question"] for e in throughput_examples],
                                [e["context"] for e in throughput_examples])
            throughput[name].append(len(throughput_examples) / (time.perf_counter() - start))
            answers_batch[name] = ours_spans(found)
        reply = reference.call(hf_request(throughput_examples, "batch"))
        throughput["hf"].append(len(throughput_examples) / reply["seconds"])
        answers_batch["hf"] = hf_spans(reply["answers"], throughput_examples)
    reference.close()

    windows = sum(len(systems["torch"].qa.tokenizer(pre_questions[e["id"]], aligned[e["context"]].text,
                                                      truncation="only_second", max_length=settings.max_seq_length,
                                                      stride=settings.doc_stride,
                                                      return_overflowing_tokens=True)["input_ids"])
                  for e in throughput_examples)
    result = {
        "model": model_note,
        "dataset": args.dataset,
        "reference": f"transformers {reference.version} pipeline('question-answering'), preprocessed text in",
        "threads": args.threads,
        "settings": options,
        "latency_questions": len(latency_examples),
        "throughput_questions": len(throughput_examples),
        "throughput_windows": windows,
        "cold_runs": args.cold_runs,
        "cold_start": cold,
        "systems": {},
    }

    def same(found: dict, name: str, other: str, n: int) -> float:
        return sum(a == b for a, b in zip(found[name], found[other], strict=True)) / n

    for name in [*systems, "hf"]:
        result["systems"][name] = {
            "p50_ms": 1000 * percentile(latency[name], 50),
            "p95_ms": 1000 * percentile(latency[name], 95),
            "questions_per_s_batch32": max(throughput[name]),
            "identical_to_torch_batch1": same(answers_one, name, "torch", len(latency_examples)),
            "identical_to_torch_batch32": same(answers_batch, name, "torch", len(throughput_examples)),
            "identical_to_hf_batch32": same(answers_batch, name, "hf", len(throughput_examples)),
            **scores(throughput_examples, answers_batch[name]),
        }
    hf = result["systems"]["hf"]
    for name in systems:
        mine = result["systems"][name]
        mine["speedup_p50"] = hf["p50_ms"] / mine["p50_ms"]
        mine["speedup_p95"] = hf["p95_ms"] / mine["p95_ms"]
        mine["speedup_throughput"] = mine["questions_per_s_batch32"] / hf["questions_per_s_batch32"]
    print_report(result)
    if args.json:
        Path(args.json).write_text(json.dumps(result, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    temp.cleanup()


def by_threads(args: argparse.Namespace) -> None:
    """One child run per thread count (thread pools are fixed per process), each printing its own report, then the
    speed-ups over Hugging Face's pipeline at each count side by side."""
    results = {}
    with tempfile.TemporaryDirectory(prefix="bench-threads-") as temp:
        for threads in args.threads:
            argv = list(sys.argv[1:])
            at = argv.index("--threads")
            end = at + 1
            while end < len(argv) and not argv[end].startswith("--"):
                end += 1
            out = Path(temp) / f"threads-{threads}.json"
            argv[at:end] = ["--threads", str(threads)]
            if "--json" in argv:
                argv[argv.index("--json"): argv.index("--json") + 2] = []
            subprocess.run([sys.executable, __file__, *argv, "--json", str(out)], check=True)
            results[threads] = json.loads(out.read_text(encoding="utf-8"))
    print("\nspeed-ups over Hugging Face's pipeline, each measured in its own run at that thread count:")
    print(f"{'threads':>7} {'system':<10} {'p50 ms':>8} {'hf p50':>8} {'×p50':>6} {'×p95':>6} {'×q/s':>6} "
          f"{'cold s':>7} {'hf cold':>7}")
    for threads, result in results.items():
        hf, cold = result["systems"]["hf"], result["cold_start"]
        for name, r in result["systems"].items():
            if name != "hf":
                print(f"{threads:>7} {name:<10} {r['p50_ms']:>8.1f} {hf['p50_ms']:>8.1f} {r['speedup_p50']:>6.2f} "
                      f"{r['speedup_p95']:>6.2f} {r['speedup_throughput']:>6.2f} "
                      f"{cold.get(name, cold['onnx'])['cold_start_s']:>7.2f} {cold['hf']['cold_start_s']:>7.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps({str(t): r for t, r in results.items()}, ensure_ascii=False, indent=2)
                                   + "\n", encoding="utf-8")


def print_report(result: dict) -> None:
    print(f"model:     {result['model']}")
    print(f"reference: {result['reference']}")
    print(f"data:      {result['dataset']}: {result['latency_questions']} questions one by one, "
          f"{result['throughput_questions']} questions ({result['throughput_windows']} windows) at batch 32; "
          f"threads {result['threads']}")
    s = result["settings"]
    print(f"settings:  max_seq_len {s['max_seq_len']}, doc_stride {s['doc_stride']}, max_question_len "
          f"{s['max_question_len']}, max_answer_len {s['max_answer_len']}, align_to_words off")
    print(f"cold start (process start → answer printed → exit; median of {result['cold_runs']}) and peak RSS:")
    names = {"onnx": "arabert-pipeline answer (ONNX)", "torch": "arabert-pipeline answer --backend torch",
             "hf": "python: transformers.pipeline(...)(q, c)"}
    for name, r in result["cold_start"].items():
        print(f"  {names[name]:<42} {r['cold_start_s']:>6.2f} s (max {r['cold_start_max_s']:.2f})"
              f" {r['peak_rss_mb']:>7.0f} MB")
    header = (f"{'system':<10} {'p50 ms':>8} {'p95 ms':>8} {'q/s @32':>8} {'×p50':>6} {'×p95':>6} {'×q/s':>6} "
              f"{'=torch@1':>8} {'=torch@32':>9} {'=hf@32':>7} {'EM':>6} {'F1':>6} {'F1soqal':>7}")
    print(header)
    for name, r in result["systems"].items():
        ratios = (f"{r['speedup_p50']:>6.2f} {r['speedup_p95']:>6.2f} {r['speedup_throughput']:>6.2f}"
                  if "speedup_p50" in r else f"{'1':>6} {'1':>6} {'1':>6}")
        print(f"{name:<10} {r['p50_ms']:>8.1f} {r['p95_ms']:>8.1f} {r['questions_per_s_batch32']:>8.1f} {ratios} "
              f"{100 * r['identical_to_torch_batch1']:>7.1f}% {100 * r['identical_to_torch_batch32']:>8.1f}% "
              f"{100 * r['identical_to_hf_batch32']:>6.1f}% {r['arabic_em']:>6.1f} {r['arabic_f1']:>6.1f} "
              f"{r['soqal_f1']:>7.1f}")
    print("× = speed-up over the Hugging Face pipeline measured in this run; =torch@1/@32 = answers with the same "
          "character span as our torch backend's (batch 1 / 32), =hf@32 as Hugging Face's; EM/F1 Arabic-correct, "
          "F1soqal SOQAL-compatible, on the batch-32 answers")


if __name__ == "__main__":
    main()
