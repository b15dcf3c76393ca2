"""Retrieval at scale (issue 59): the shared corpus and every QA paragraph of the shared QA sets in one index, built
and searched at 10,000 / 100,000 / all passages.

    python benchmarks/bench_retrieval.py --out notebooks/results/retrieval/bench.json              # ../shared/data
    python benchmarks/bench_retrieval.py --data-root DIR --sizes 10000 all --out bench.json

Documents, in this order: the paragraphs of the dev questions (arcd-dev, MLQA-ar dev), then every other paragraph of
the QA sets under DATA_ROOT/qa/ (each text once), then the articles of DATA_ROOT/corpus/*.txt.xz (files in name order;
an article one document, its paragraphs its lines, as `arabert-pipeline index` reads them). A size takes the first
documents that give at least that many passages, so every size holds the dev paragraphs.

Per size, each step in a process of its own (so that its memory is its own):
- build: `Index.build(texts, ids, titles, path=DIR)` (what `arabert-pipeline index` runs), timed from the documents in
  memory to the index written; its peak RSS;
- search: `Index.open(DIR)` (every file's SHA-256 checked) timed, the RSS once open, then each dev question searched
  for its 20 best passages on one thread (ms a question: analysis, scoring and hits with their documents' ids, titles
  and texts; p50, mean, p95), the RSS after, and recall@1/5/20 and MRR@20 of the passage that holds the question's
  first answer (ARCD-test and TyDiQA-ar dev questions are never asked);
- with --compare-tantivy, the same passages and terms indexed by tantivy too (built after the index, timed alone), and
  both libraries timed for the ranked passages' positions alone.

With --verb, last: `arabert-pipeline index DATA_ROOT/qa/*.json DATA_ROOT/corpus/*.txt.xz -o DIR` itself (reading the
files included; the QA sets' shared paragraphs indexed once per file, as the verb does), its wall time and peak RSS.

And first, in this process, `rank_passages` on long contexts (--context-chars): each arcd-dev question asked of its
article followed by the set's other articles and then ARCD-train's, cut to 2,000 / 10,000 / 20,000 / 40,000
characters: ms a call with the context's index built (p50, mean, p95), ms with it cached (a second question), passages
a context, and recall@1/5 of the passage holding the answer.

The machine is whatever runs it: the load average before and after is recorded. Run by hand, alone, not in CI (the
whole corpus takes minutes); tests/test_bench_retrieval.py runs it at tiny size on the test slices.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEV_SETS = ("arcd-dev", "mlqa-ar-dev")
K = 20


def _status_mb(field: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def rss_mb() -> float:
    return _status_mb("VmRSS")


def peak_rss_mb() -> float:
    # VmHWM, not getrusage's ru_maxrss: Linux keeps ru_maxrss across exec, so a child started by this (large)
    # process would report the parent's size as its own peak.
    return _status_mb("VmHWM")


# `arabert-pipeline index ...` in this process, then its peak RSS on stderr's last line.
VERB = """
import sys
from arabert_pipeline.cli import main
code = main(sys.argv[1:])
print("peak_rss_mb", [l for l in open("/proc/self/status") if l.startswith("VmHWM:")][0].split()[1], file=sys.stderr)
sys.exit(code)
"""


def collect(data_root: Path) -> tuple[list[dict], list[dict]]:
    """(documents {"id", "title", "text"} in index order, dev questions {question, position, answer_start})."""
    from arabert_pipeline.qa.data import read_squad
    from arabert_pipeline.retrieval.inputs import read_documents

    documents, position_of = [], {}

    def add(text: str, id_: str, title: str | None) -> int:
        if text not in position_of:
            position_of[text] = len(documents)
            documents.append({"id": id_, "title": title, "text": text})
        return position_of[text]

    questions = []
    for name in DEV_SETS:
        for example in read_squad(name, misaligned="keep").examples:
            position = add(example["context"], f"{name}:{example['title']}#{len(position_of)}", example["title"])
            questions.append({"question": example["question"], "position": position,
                              "answer_start": example["answers"]["answer_start"][0]})
    for path in sorted((data_root / "qa").glob("*.json")):
        found = read_documents([path])
        for text, id_, title in zip(found.texts, found.ids, found.titles, strict=True):
            add(text, id_, title)
    for path in sorted((data_root / "corpus").glob("*.txt.xz")):
        found = read_documents([path])
        for text, id_ in zip(found.texts, found.ids, strict=True):
            add(text, id_, None)
    return documents, questions


def prefix_for(documents: list[dict], passages: int, passage_chars: int) -> tuple[int, int]:
    """(documents, their passages): the fewest first documents giving at least `passages` passages."""
    from arabert_pipeline.retrieval.passages import split_passages

    total = 0
    for count, document in enumerate(documents, 1):
        total += len(split_passages(document["text"], passage_chars))
        if total >= passages:
            return count, total
    return len(documents), total


# ------------------------------------------------------------------------------------------ child processes

def child_build(documents_file: str, count: int, output: str, analysis: str, passage_chars: int,
                compare: bool) -> dict:
    from arabert_pipeline.retrieval import Index

    with open(documents_file, encoding="utf-8") as lines:
        rows = [json.loads(line) for line in itertools.islice(lines, count)]
    texts, ids, titles = ([row[key] for row in rows] for key in ("text", "id", "title"))
    del rows
    before = rss_mb()
    started = time.perf_counter()
    index = Index.build(texts, ids, titles, output, analysis=analysis, passage_chars=passage_chars)
    seconds = time.perf_counter() - started
    row = {"build_seconds": round(seconds, 1), "passages": len(index), "documents": index.documents,
           "rss_documents_mb": round(before), "build_peak_rss_mb": round(peak_rss_mb()),
           "index_mb": round(sum(p.stat().st_size for p in Path(output).iterdir()) / 1e6, 1)}
    if compare:
        from retrieval_dev import Tantivy

        started = time.perf_counter()
        Tantivy.build(texts, analysis, passage_chars, Path(f"{output}.tantivy"))
        row["tantivy_build_seconds"] = round(time.perf_counter() - started, 1)
        row["tantivy_mb"] = round(sum(p.stat().st_size for p in Path(f"{output}.tantivy").iterdir()) / 1e6, 1)
    return row


def child_search(index_dir: str, questions_file: str) -> dict:
    from arabert_pipeline.retrieval import Index

    questions = json.loads(Path(questions_file).read_text(encoding="utf-8"))
    base = rss_mb()
    started = time.perf_counter()
    index = Index.open(index_dir)
    open_seconds = time.perf_counter() - started
    loaded = rss_mb()
    index.search(questions[0]["question"], K)  # the first search pays for lazy imports
    times, ranks = [], []
    for question in questions:
        started = time.perf_counter()
        hits = index.search(question["question"], K)
        times.append(1000 * (time.perf_counter() - started))
        ranks.append(rank_of([(h.passage.document, h.passage.start, h.passage.end) for h in hits], question))
    row = {"open_seconds": round(open_seconds, 2), "rss_before_open_mb": round(base), "rss_loaded_mb": round(loaded),
           "rss_after_queries_mb": round(rss_mb()), "search_peak_rss_mb": round(peak_rss_mb()),
           "questions": len(questions), **timing(times), **recall(ranks)}
    if Path(f"{index_dir}.tantivy").is_dir():  # --compare-tantivy: the ranked passages alone, both libraries
        from retrieval_dev import Tantivy

        tantivy = Tantivy.__new__(Tantivy)
        tantivy.open(Path(f"{index_dir}.tantivy"), index._passages, index.analysis)
        for name, search in (("bm25s", lambda q: index._passages[index._scorer.top(index._analysis.terms(q), K)[0]]
                              .tolist()), ("tantivy", lambda q: tantivy.search(q, K))):
            search(questions[0]["question"])
            times, ranks = [], []
            for question in questions:
                started = time.perf_counter()
                hits = search(question["question"])
                times.append(1000 * (time.perf_counter() - started))
                ranks.append(rank_of(hits, question))
            row[f"{name}_positions_only"] = {**timing(times), **recall(ranks)}
    return row


def rank_of(hits, question: dict) -> int | None:
    """The rank of the passage (document, start, end) that holds the question's answer, or None."""
    return next((r for r, (d, start, end) in enumerate(hits, 1) if d == question["position"]
                 and start <= question["answer_start"] < end), None)


def timing(times: list[float]) -> dict:
    import numpy as np

    return {"ms_p50": round(statistics.median(times), 2), "ms_mean": round(statistics.fmean(times), 2),
            "ms_p95": round(float(np.percentile(times, 95)), 2)}


def recall(ranks: list[int | None]) -> dict:
    import numpy as np

    found = {f"recall@{k}": round(100 * float(np.mean([r is not None and r <= k for r in ranks])), 1)
             for k in (1, 5, 20)}
    return {**found, "mrr@20": round(100 * float(np.mean([0 if r is None else 1 / r for r in ranks])), 1)}


def long_contexts(sizes: list[int], passage_chars: int, analysis: str) -> list[dict]:
    """`rank_passages` on one long context a question, as `Pipeline.answer` calls it: each arcd-dev question asked of
    its article followed by the set's other articles, then ARCD-train's (text beside it, never asked about), up to
    `size` characters (paragraphs a line), its index built afresh each time (the cache of recent contexts cleared),
    then asked again of the same context (cached)."""
    import numpy as np

    from arabert_pipeline.qa.data import read_squad
    from arabert_pipeline.retrieval import index as index_module

    examples = read_squad("arcd-dev", misaligned="keep").examples
    articles: dict[str, list[str]] = {}  # arcd-dev's articles, then arcd-train-rest's as more text beside them
    for example in [*examples, *read_squad("arcd-train-rest", misaligned="keep").examples]:
        paragraphs = articles.setdefault(example["title"], [])
        if example["context"] not in paragraphs:
            paragraphs.append(example["context"])
    rows = []
    for size in sizes:
        times, cached, counts, ranks = [], [], [], []
        for example in examples:
            ordered = [example["title"], *(t for t in articles if t != example["title"])]
            paragraphs = [p for title in ordered for p in articles[title]]
            context = "\n".join(paragraphs)[:size].rsplit(" ", 1)[0] if size < sum(map(len, paragraphs)) else \
                "\n".join(paragraphs)
            answer = context.find(example["context"]) + example["answers"]["answer_start"][0]
            index_module._context_index.cache_clear()
            started = time.perf_counter()
            hits = index_module.rank_passages(example["question"], context, analysis=analysis,
                                              passage_chars=passage_chars, k=3)
            times.append(1000 * (time.perf_counter() - started))
            started = time.perf_counter()
            index_module.rank_passages(example["question"], context, analysis=analysis, passage_chars=passage_chars,
                                       k=3)
            cached.append(1000 * (time.perf_counter() - started))
            counts.append(len(index_module._context_index(context, analysis, passage_chars)))
            ranks.append(next((r for r, h in enumerate(hits, 1) if h.passage.start <= answer < h.passage.end), None))
        rows.append({"context_chars": size, "questions": len(examples),
                     "passages_mean": round(float(np.mean(counts)), 1),
                     "ms_p50": round(statistics.median(times), 2), "ms_mean": round(statistics.fmean(times), 2),
                     "ms_p95": round(float(np.percentile(times, 95)), 2),
                     "cached_ms_p50": round(statistics.median(cached), 3),
                     **{k: v for k, v in recall(ranks).items() if k in ("recall@1", "recall@5")}})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def in_child(*args: str) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "scripts"), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, __file__, "_child", *args], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{args[0]} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_verb(data_root: Path, output: Path, analysis: str, passage_chars: int) -> dict:
    """`arabert-pipeline index` on every QA file and corpus file of the data root, as a user runs it: wall time,
    peak RSS, what it printed."""
    inputs = [*sorted((data_root / "qa").glob("*.json")), *sorted((data_root / "corpus").glob("*.txt.xz"))]
    command = [sys.executable, "-c", VERB, "index", *map(str, inputs), "-o", str(output), "--analysis", analysis,
               "--passage-chars", str(passage_chars), "--no-progress"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"arabert-pipeline index failed:\n{done.stderr[-3000:]}")
    peak = int(done.stderr.strip().splitlines()[-1].split()[1]) / 1024
    return {"command": "arabert-pipeline index DATA/qa/*.json DATA/corpus/*.txt.xz -o DIR", "inputs": len(inputs),
            "seconds": round(seconds, 1), "peak_rss_mb": round(peak),
            "printed": done.stdout.strip().splitlines()[-1].replace(str(output.parent), "WORKDIR")}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_child"]:
        kind, *rest = argv[1:]
        if kind == "build":
            result = child_build(rest[0], int(rest[1]), rest[2], rest[3], int(rest[4]), rest[5] == "1")
        else:
            result = child_search(*rest)
        print(json.dumps(result))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", type=Path, default=Path(os.environ.get("ARABERT_PIPELINE_DATA",
                                                                              REPO.parent / "shared" / "data")))
    parser.add_argument("--sizes", nargs="*", default=["10000", "100000", "all"],
                        help="passages per index (at least), or `all`")
    parser.add_argument("--analysis", default=None, help="default: the package's")
    parser.add_argument("--passage-chars", type=int, default=None, help="default: the package's")
    parser.add_argument("--context-chars", nargs="*", type=int, default=[2000, 10000, 20000, 40000],
                        help="long contexts for rank_passages (none: skip)")
    parser.add_argument("--compare-tantivy", action="store_true",
                        help="also index the same analysed passages with tantivy (scripts/retrieval_dev.py's) and "
                             "time both libraries' ranked positions alone")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--workdir", type=Path, default=None, help="where the indexes are built (default: a temp dir)")
    parser.add_argument("--verb", action="store_true",
                        help="also time `arabert-pipeline index` on all of DATA_ROOT/qa/*.json and corpus/*.txt.xz")
    args = parser.parse_args(argv)
    os.environ["ARABERT_PIPELINE_DATA"] = str(args.data_root)
    sys.path.insert(0, str(REPO))
    from arabert_pipeline.retrieval import DEFAULT_ANALYSIS, DEFAULT_PASSAGE_CHARS

    analysis = args.analysis or DEFAULT_ANALYSIS
    passage_chars = args.passage_chars or DEFAULT_PASSAGE_CHARS
    load_before = os.getloadavg()
    contexts = long_contexts(args.context_chars, passage_chars, analysis) if args.context_chars else []
    documents, questions = collect(args.data_root)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-retrieval-", dir=args.workdir) as workdir:
        workdir = Path(workdir)
        documents_file, questions_file = workdir / "documents.jsonl", workdir / "questions.json"
        with open(documents_file, "w", encoding="utf-8") as f:
            f.writelines(json.dumps(d, ensure_ascii=False) + "\n" for d in documents)
        questions_file.write_text(json.dumps(questions, ensure_ascii=False), encoding="utf-8")
        for size in args.sizes:
            wanted = len(documents) if size == "all" else int(size)
            count = len(documents) if size == "all" else prefix_for(documents, wanted, passage_chars)[0]
            index_dir = workdir / f"index-{size}"
            row = {"size": size, **in_child("build", str(documents_file), str(count), str(index_dir), analysis,
                                           str(passage_chars), "1" if args.compare_tantivy else "0")}
            row.update(in_child("search", str(index_dir), str(questions_file)))
            rows.append(row)
            print(json.dumps(row), flush=True)
        verb = run_verb(args.data_root, workdir / "verb-index", analysis, passage_chars) if args.verb else None
        if verb:
            print(json.dumps(verb, ensure_ascii=False), flush=True)
    from arabert_pipeline.artifacts.paths import portable_path

    report = {"argv": [portable_path(arg) for arg in argv], "analysis": analysis, "passage_chars": passage_chars,
              "documents_available": len(documents),
              "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "load_before": load_before,
                          "load_after": os.getloadavg()}, "rows": rows, "long_contexts": contexts, "verb": verb}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print("| passages | documents | build s | peak RSS build MB | index MB | open s | RSS loaded MB "
          "| ms p50 / mean / p95 | recall@1/5/20 |")
    for row in rows:
        print(f"| {row['passages']:,} | {row['documents']:,} | {row['build_seconds']} | {row['build_peak_rss_mb']} | "
              f"{row['index_mb']} | {row['open_seconds']} | {row['rss_loaded_mb']} | {row['ms_p50']} / "
              f"{row['ms_mean']} / {row['ms_p95']} | {row['recall@1']} / {row['recall@5']} / {row['recall@20']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
