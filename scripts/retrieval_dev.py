"""Which retrieval library and analysis, measured on dev questions only (issue 59): how often the passage holding a
question's answer is among the first k, and what it costs.

    python scripts/retrieval_dev.py --out notebooks/results/retrieval/dev.json                     # everything
    python scripts/retrieval_dev.py --systems bm25s --analyses arabertv02-light --passage-chars 600 --out x.json

Questions: arcd-dev (15 ARCD-train articles) and MLQA-ar dev, never ARCD-test or TyDiQA-ar dev. A question's gold
passage is the passage of its own paragraph that holds its first answer's start. Collections: (a) each set's own
paragraphs, (b) both sets' paragraphs plus the first `--news-paragraphs` paragraph lines of the shared corpus (its
files in name order, whole articles, each article one document as `arabert-pipeline index` reads it). Every system
ranks the same passages (retrieval/passages.py) analysed the same way (retrieval/analysis.py), except Lucene, which
analyses the passages' text with its own Arabic analyzer:

- `bm25s`: the package's Index (bm25s, Lucene's BM25 variant, k1 1.5, b 0.75), built into a directory and opened;
- `tantivy`: tantivy-py (no dependency of the package: `pip install tantivy==0.27.0` to compare), the analysed terms
  joined by spaces under its whitespace tokenizer (its BM25: k1 1.2, b 0.75), one writer thread, an on-disk index;
- `lucene`: Anserini's fat jar (`--anserini-jar`, from the pyserini 0.21 wheel: Lucene 9 on Java 11+) with
  `-language ar` (Lucene's ArabicAnalyzer: normalization, light stemming, stopwords) and `-bm25` (k1 0.9, b 0.4), run
  as its IndexCollection / SearchCollection commands; its ms a query is (all queries − one query) / (queries − 1).

Per question: rank of the gold passage (first 100), so recall@1/5/20 and MRR@100; ×100 means with bootstrap CIs and
paired bootstrap differences (evaluate/metrics.py) against the first system and analysis given; with several passage
sizes, also each size against the first at equal characters read (recall@k of the first size against recall at
k × first / size). Times: build (analysis +
library indexing, one thread) and ms a query for the 100 best passages' positions (analysis included, one thread), on
whatever else the machine runs; for bm25s also `Index.search(q, 20)`, which builds each hit with its document's id,
title and text. Sizes: the library's files (bm25s: its weight arrays and the vocabulary; the whole index directory,
documents included, is `bytes_with_documents`).
"""
from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
SETS = ("arcd-dev", "mlqa-ar-dev")
KS = (1, 5, 20)
DEPTH = 100


def dev_sets() -> dict[str, dict]:
    """Per set: its paragraphs (unique contexts, in order) and questions (position of their paragraph, answer start)."""
    from arabert_pipeline.qa.data import read_squad

    sets = {}
    for name in SETS:
        contexts: dict[str, int] = {}
        questions = []
        for example in read_squad(name, misaligned="keep").examples:
            position = contexts.setdefault(example["context"], len(contexts))
            questions.append({"id": example["id"], "question": example["question"], "paragraph": position,
                              "answer_start": example["answers"]["answer_start"][0]})
        sets[name] = {"paragraphs": list(contexts), "questions": questions}
    return sets


def news_documents(corpus_dir: Path, paragraphs: int) -> tuple[list[str], list[str], int]:
    """(texts, ids, paragraph lines) of whole corpus articles, files in name order, until `paragraphs` lines."""
    from arabert_pipeline.retrieval.inputs import read_documents

    documents = read_documents(sorted(corpus_dir.glob("*.txt.xz")), max_paragraphs=paragraphs)
    return documents.texts, documents.ids, documents.paragraphs()


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


# ------------------------------------------------------------------------------------------------------- systems

class Bm25s:
    name = "bm25s"

    def __init__(self, texts, ids, analysis, passage_chars, workdir: Path):
        from arabert_pipeline.retrieval import Index
        from arabert_pipeline.retrieval.store import SCORER_FILES, TERMS_FILE

        started = time.perf_counter()
        Index.build(texts, ids, path=workdir / "index", analysis=analysis, passage_chars=passage_chars)
        self.build_seconds = time.perf_counter() - started
        started = time.perf_counter()
        self.index = Index.open(workdir / "index")
        self.open_seconds = time.perf_counter() - started
        # The library's part, as the other systems' sizes are: the weights and the vocabulary, not the documents.
        self.size = sum((workdir / "index" / name).stat().st_size for name in (*SCORER_FILES.values(), TERMS_FILE))
        self.total_size = dir_bytes(workdir / "index")
        self.passages = len(self.index)

    def search(self, question: str, k: int) -> list[tuple[int, int, int]]:
        """The ranked passages alone, as the other systems give them (Index.search also reads each hit's document:
        `api_ms` times that)."""
        rows, _ = self.index._scorer.top(self.index._analysis.terms(question), k)
        return [tuple(row) for row in self.index._passages[rows].tolist()]

    def api_ms(self, questions: list[str], k: int) -> float:
        started = time.perf_counter()
        for question in questions:
            self.index.search(question, k)
        return 1000 * (time.perf_counter() - started) / len(questions)


def analysed_passages(texts, analysis, passage_chars):
    from arabert_pipeline.retrieval.analysis import get_analysis
    from arabert_pipeline.retrieval.index import analyse_chunk

    passages, rows = analyse_chunk(texts, 0, get_analysis(analysis), passage_chars)
    return passages, rows


class Tantivy:
    name = "tantivy"

    def __init__(self, texts, ids, analysis, passage_chars, workdir: Path):
        started = time.perf_counter()
        passages = self.build(texts, analysis, passage_chars, workdir / "tantivy")
        self.build_seconds = time.perf_counter() - started
        started = time.perf_counter()
        self.open(workdir / "tantivy", passages, analysis)
        self.open_seconds = time.perf_counter() - started
        self.size = dir_bytes(workdir / "tantivy")

    @staticmethod
    def build(texts, analysis, passage_chars, directory: Path) -> np.ndarray:
        """Index the passages' analysed terms into `directory` (one writer thread); the passages' table."""
        import tantivy

        passages, rows = analysed_passages(texts, analysis, passage_chars)
        builder = tantivy.SchemaBuilder()
        builder.add_text_field("terms", stored=False, tokenizer_name="whitespace", index_option="freq")
        builder.add_integer_field("row", stored=True, indexed=False)
        directory.mkdir()
        index = tantivy.Index(builder.build(), path=str(directory))
        writer = index.writer(heap_size=256_000_000, num_threads=1)
        for row, terms in enumerate(rows):
            writer.add_document(tantivy.Document(terms=" ".join(terms), row=row))
        writer.commit()
        writer.wait_merging_threads()
        return passages

    def open(self, directory: Path, passages: np.ndarray, analysis: str) -> None:
        import tantivy

        from arabert_pipeline.retrieval.analysis import get_analysis

        self.index = tantivy.Index.open(str(directory))
        self.schema = self.index.schema
        self.searcher = self.index.searcher()
        self.table, self.passages = passages, len(passages)
        self.analysis = get_analysis(analysis)
        self.tantivy = tantivy

    def search(self, question: str, k: int) -> list[tuple[int, int, int]]:
        terms = self.analysis.terms(question)
        if not terms:
            return []
        query = self.tantivy.Query.boolean_query(
            [(self.tantivy.Occur.Should, self.tantivy.Query.term_query(self.schema, "terms", term)) for term in terms])
        hits = self.searcher.search(query, k).hits
        rows = [self.searcher.doc(address)["row"][0] for _, address in hits]
        return [tuple(int(v) for v in self.table[row]) for row in rows]


class Lucene:
    """Anserini's command-line indexer and searcher over the same passages' raw text, `-language ar`."""

    name = "lucene"

    def __init__(self, texts, ids, analysis, passage_chars, workdir: Path, jar: Path, questions: list[str]):
        from arabert_pipeline.retrieval.passages import split_passages

        self.jar = jar
        self.table = [(d, p.start, p.end) for d, text in enumerate(texts) for p in split_passages(text, passage_chars)]
        collection = workdir / "collection"
        collection.mkdir()
        with open(collection / "passages.jsonl", "w", encoding="utf-8") as f:
            for row, (d, start, end) in enumerate(self.table):
                f.write(json.dumps({"id": str(row), "contents": texts[d][start:end]}, ensure_ascii=False) + "\n")
        started = time.perf_counter()
        self._java("io.anserini.index.IndexCollection", "-collection", "JsonCollection", "-input", str(collection),
                   "-index", str(workdir / "lucene"), "-generator", "DefaultLuceneDocumentGenerator", "-threads", "1",
                   "-language", "ar")
        self.build_seconds = time.perf_counter() - started
        self.size = dir_bytes(workdir / "lucene")
        self.passages = len(self.table)
        self.open_seconds = float("nan")
        self.workdir = workdir
        self.runs = self._search_all(questions)

    def _java(self, main: str, *args: str) -> float:
        started = time.perf_counter()
        subprocess.run(["java", "-cp", str(self.jar), main, *args], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        return time.perf_counter() - started

    def _search_all(self, questions: list[str]) -> dict[str, list[tuple[int, int, int]]]:
        def run(selected: list[str], name: str) -> tuple[float, Path]:
            topics = self.workdir / f"{name}.tsv"
            topics.write_text("".join(f"{i}\t{' '.join(q.split())}\n" for i, q in enumerate(selected)),
                              encoding="utf-8")
            output = self.workdir / f"{name}.run"
            seconds = self._java("io.anserini.search.SearchCollection", "-index", str(self.workdir / "lucene"),
                                 "-topics", str(topics), "-topicreader", "TsvInt", "-output", str(output), "-bm25",
                                 "-hits", str(DEPTH), "-language", "ar", "-threads", "1")
            return seconds, output

        one, _ = run(questions[:1], "one")
        every, output = run(questions, "all")
        self.ms_per_query = 1000 * (every - one) / max(1, len(questions) - 1)
        ranked: dict[int, list[tuple[float, int]]] = {}
        for line in output.read_text(encoding="utf-8").splitlines():
            qid, _, row, _, score, _ = line.split()
            ranked.setdefault(int(qid), []).append((-float(score), int(row)))
        return {questions[i]: [self.table[row] for _, row in sorted(found)] for i, found in ranked.items()}

    def search(self, question: str, k: int) -> list[tuple[int, int, int]]:
        return self.runs.get(question, [])[:k]


# ------------------------------------------------------------------------------------------------------- scoring

def gold_rank(hits: list[tuple[int, int, int]], document: int, answer_start: int) -> int | None:
    for rank, (d, start, end) in enumerate(hits, 1):
        if d == document and start <= answer_start < end:
            return rank
    return None


def per_question(ranks: list[int | None]) -> np.ndarray:
    """(questions, len(KS) + 1): hit@k for each k, then the reciprocal rank (0 past DEPTH)."""
    return np.array([[float(r is not None and r <= k) for k in KS] + [0.0 if r is None else 1.0 / r] for r in ranks])


def measure(system, questions: list[dict], offset: int) -> dict:
    """Ranks and ms a query of `system` for `questions` (their paragraph positions shifted by `offset`)."""
    ranks, times = [], []
    for question in questions:
        started = time.perf_counter()
        hits = system.search(question["question"], DEPTH)
        times.append(1000 * (time.perf_counter() - started))
        ranks.append(gold_rank(hits, question["paragraph"] + offset, question["answer_start"]))
    ms = getattr(system, "ms_per_query", None)
    api = system.api_ms([q["question"] for q in questions], 20) if hasattr(system, "api_ms") else None
    return {"ranks": ranks, "ms_mean": ms if ms is not None else statistics.fmean(times),
            "ms_p50": None if ms is not None else statistics.median(times),
            "ms_p95": None if ms is not None else float(np.percentile(times, 95)), "api_ms_k20": api}


def summary(matrix: np.ndarray) -> dict:
    from arabert_pipeline.evaluate.metrics import bootstrap_ci

    ci = bootstrap_ci(matrix)
    names = [f"recall@{k}" for k in KS] + [f"mrr@{DEPTH}"]
    return {name: {"mean": round(float(ci["mean"][i]), 2), "low": round(float(ci["low"][i]), 2),
                   "high": round(float(ci["high"][i]), 2)} for i, name in enumerate(names)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--data-root", type=Path, default=Path(os.environ.get("ARABERT_PIPELINE_DATA",
                                                                              REPO.parent / "shared" / "data")))
    parser.add_argument("--systems", nargs="+", default=["bm25s", "tantivy", "lucene"])
    parser.add_argument("--analyses", nargs="+", default=["arabertv02-light"])
    parser.add_argument("--passage-chars", nargs="+", type=int, default=[600])
    parser.add_argument("--news-paragraphs", type=int, default=100_000)
    parser.add_argument("--collections", nargs="+", default=["own", "news"], choices=["own", "news"])
    parser.add_argument("--anserini-jar", type=Path, help="Anserini's fat jar (for --systems lucene)")
    args = parser.parse_args(argv)
    os.environ["ARABERT_PIPELINE_DATA"] = str(args.data_root)
    from arabert_pipeline.evaluate.metrics import paired_bootstrap

    sets = dev_sets()
    news_texts, news_ids, news_lines = news_documents(args.data_root / "corpus", args.news_paragraphs) \
        if "news" in args.collections else ([], [], 0)
    collections = []  # (name, texts, ids, {set: paragraph offset})
    if "own" in args.collections:
        for name in SETS:
            collections.append((f"own:{name}", sets[name]["paragraphs"],
                                [f"{name}#{i}" for i in range(len(sets[name]["paragraphs"]))], {name: 0}))
    if "news" in args.collections:
        texts, ids, offsets = [], [], {}
        for name in SETS:
            offsets[name] = len(texts)
            texts += sets[name]["paragraphs"]
            ids += [f"{name}#{i}" for i in range(len(sets[name]["paragraphs"]))]
        collections.append((f"dev+news{news_lines // 1000}k", texts + news_texts, ids + news_ids, offsets))
    configs = [(system, analysis, chars) for system in args.systems for analysis in args.analyses
               for chars in args.passage_chars if not (system == "lucene" and analysis != args.analyses[0])]
    results, matrices, rank_lists = [], {}, {}
    for collection, texts, ids, offsets in collections:
        questions = [(name, q) for name in offsets for q in sets[name]["questions"]]
        for system_name, analysis, chars in configs:
            with tempfile.TemporaryDirectory(prefix="retrieval-dev-") as workdir:
                workdir = Path(workdir)
                if system_name == "lucene":
                    if args.anserini_jar is None:
                        print("skipping lucene: no --anserini-jar", file=sys.stderr)
                        continue
                    system = Lucene(texts, ids, analysis, chars, workdir, args.anserini_jar,
                                    [q["question"] for _, q in questions])
                else:
                    system = {"bm25s": Bm25s, "tantivy": Tantivy}[system_name](texts, ids, analysis, chars, workdir)
                row = {"collection": collection, "system": system_name,
                       "analysis": "lucene-arabic" if system_name == "lucene" else analysis, "passage_chars": chars,
                       "documents": len(texts), "passages": system.passages,
                       "build_seconds": round(system.build_seconds, 2), "open_seconds": round(system.open_seconds, 3),
                       "bytes": system.size, "bytes_with_documents": getattr(system, "total_size", None),
                       "sets": {}}
                all_ranks = []
                for name in offsets:
                    measured = measure(system, sets[name]["questions"], offsets[name])
                    all_ranks += measured["ranks"]
                    matrix = per_question(measured["ranks"])
                    matrices[(collection, name, system_name, row["analysis"], chars)] = matrix
                    row["sets"][name] = {"questions": len(matrix), **summary(matrix),
                                         "ms_per_query": round(measured["ms_mean"], 3),
                                         "ms_p50": measured["ms_p50"] and round(measured["ms_p50"], 3),
                                         "ms_p95": measured["ms_p95"] and round(measured["ms_p95"], 3),
                                         "index_search_ms_k20": measured["api_ms_k20"] and
                                         round(measured["api_ms_k20"], 3)}
                matrix = per_question(all_ranks)
                matrices[(collection, "pooled", system_name, row["analysis"], chars)] = matrix
                rank_lists[(collection, "pooled", system_name, row["analysis"], chars)] = all_ranks
                row["pooled_ranks"] = all_ranks  # each question's gold rank (null: not in the first 100)
                row["pooled"] = {"questions": len(matrix), **summary(matrix)}
                results.append(row)
                print(json.dumps({k: row[k] for k in ("collection", "system", "analysis", "passage_chars",
                                                      "passages", "build_seconds", "bytes")}, ensure_ascii=False),
                      json.dumps(row["pooled"]), flush=True)
    comparisons = []
    for (collection, part, *config), matrix in matrices.items():
        base = next(((c, p, *b) for (c, p, *b) in matrices if c == collection and p == part), None)
        if base is None or tuple(base[2:]) == tuple(config):
            continue
        diff = paired_bootstrap(matrix, matrices[base])
        comparisons.append({"collection": collection, "set": part, "system": "/".join(map(str, config)),
                            "against": "/".join(map(str, base[2:])),
                            **{name: {"diff": round(float(diff["diff"][i]), 2), "low": round(float(diff["low"][i]), 2),
                                      "high": round(float(diff["high"][i]), 2),
                                      "p": round(float(diff["p_value"][i]), 4)}
                               for i, name in enumerate([f"recall@{k}" for k in KS] + [f"mrr@{DEPTH}"])}})
    # Passage sizes at equal characters read: the first size's recall@k against another size's at the k that reads
    # as many characters (k × size), paired.
    for (collection, part, system_name, analysis, chars), ranks in rank_lists.items():
        base_chars = args.passage_chars[0]
        base = rank_lists.get((collection, part, system_name, analysis, base_chars))
        if base is None or chars == base_chars:
            continue
        for k in (5, 10, 20):
            other_k = max(1, round(k * base_chars / chars))
            hit = lambda found, depth: np.array([[float(r is not None and r <= depth)] for r in found])  # noqa: E731
            diff = paired_bootstrap(hit(ranks, other_k), hit(base, k))
            comparisons.append({"collection": collection, "set": part, "equal_characters": k * base_chars,
                                "system": f"{system_name}/{analysis}/{chars}@{other_k}",
                                "against": f"{system_name}/{analysis}/{base_chars}@{k}",
                                "recall": {"diff": round(float(diff["diff"][0]), 2),
                                           "low": round(float(diff["low"][0]), 2),
                                           "high": round(float(diff["high"][0]), 2),
                                           "p": round(float(diff["p_value"][0]), 4)}})
    args.out.parent.mkdir(parents=True, exist_ok=True)
    machine = {"python": platform.python_version(), "cpus": os.cpu_count(), "load_average": os.getloadavg()}
    # tantivy is no dependency of the package: its version is recorded only where it was compared
    versions = {name: importlib.metadata.version(name) for name in ("bm25s", "tantivy")
                if name == "bm25s" or "tantivy" in args.systems}
    args.out.write_text(json.dumps({"argv": sys.argv[1:], "machine": machine, "versions": versions,
                                    "news_paragraph_lines": news_lines, "news_documents": len(news_texts),
                                    "results": results, "comparisons": comparisons}, ensure_ascii=False, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
