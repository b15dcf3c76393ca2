"""Questions asked of documents and of a collection instead of their paragraph (`evaluate --documents K`,
`--collection`; issue 59): what a user holding an article or a folder of them gets from a QA model.

Settings, each beside the paragraph-given run of the same model on the same questions (the oracle):

- documents: each question asked of its article joined with K other articles of its set, drawn with a generator
  seeded by the run's seed and the article's title and shuffled with it (the same document on every run), paragraphs
  joined by a blank line, the gold answers' offsets moved into the document. Read as `QAModel.predict` reads a long
  context (qa/transformer/passages.py): a document of at most `long_context_windows` windows whole, a longer one by its
  passages, ranked against the question by the retriever;
- collection: each question asked of one collection holding every paragraph of every --data set (each paragraph a
  document, titled with its article), plus the distractor documents when given (`--distractors`: corpus files, SQuAD
  or JSON lines files, or an index directory, whose documents are read back), read as `Pipeline.answer(q, index=...)`
  reads an index's hits. No-answer cases: a seeded share of the articles (`--withhold`, half by default) is left out of
  a second collection, and their questions asked of it with allow_no_answer, where only no answer is right.

Per question and retriever (evaluate/retrievers.py: the package's BM25 and SOQAL's TF-IDF), one retrieval of the first
DEPTH passages (recall@1/5/20 of the gold paragraph in a collection, of the passage holding the answer's start in a
document) and one reading of the first max(GRID_PASSAGES) of them, in slices at the grid's passage counts, each slice
timed: the model's own answer (its `passages_read` and `passage_null_weight`) and every cell of the grid that chose
them (GRID_PASSAGES × GRID_NULL_WEIGHTS) come from that one reading, and the end-to-end time of n passages is the
retrieval plus the reading of the first n. A document's time also counts the long-context check (preprocessing and
windowing the whole document, as `predict` does) and building the document's throwaway index (as for a new
document; `rank_passages` keeps the last few, so a second question about the same text skips it).

Every answer is scored against the question's paragraph as `evaluate` scores a paragraph-given answer (EM / F1 /
Sentence-Match, SOQAL and Arabic variants): its offset is moved into the paragraph when it lies there, and an answer
from anywhere else counts by its text alone, as an answer of a predictions file without offsets does.
"""
from __future__ import annotations

import dataclasses
import random
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..artifacts.paths import portable_path
from ..errors import ConfigError, InputError
from . import metrics
from .buckets import score_system
from .retrievers import RETRIEVERS, Retriever, build_retriever

if TYPE_CHECKING:
    from ..qa.transformer.decode import Answer
    from ..qa.transformer.model import QAModel
    from ..qa.transformer.passages import PassageRead
    from ..retrieval.index import Hit

SETTINGS = ("documents", "collection")
DEPTH = 20  # passages retrieved per question: recall@RECALL_AT's deepest
RECALL_AT = (1, 5, 20)
# The grid that chose the shipped passages_read and passage_null_weight (qa/transformer/settings.py), read from one
# reading of the first max(GRID_PASSAGES) passages per question.
GRID_PASSAGES = (1, 2, 3, 5)
GRID_NULL_WEIGHTS = (0.0, 1.0, 1.5, 2.0)
# The no-answer curve: the null-margin threshold at which this share of the answerable questions keeps an answer.
KEEP_ANSWERED = (0.95, 0.9, 0.85, 0.8, 0.7)
GRID_KEYS = ("soqal_em", "soqal_f1", "arabic_f1")


@dataclasses.dataclass(frozen=True)
class OpenOptions:
    """What `evaluate` asks besides the paragraph-given run (its flags)."""

    documents: int | None = None  # K other articles beside the gold one; None: no documents setting
    collection: bool = False
    distractors: tuple[str, ...] = ()  # files or an index directory, added to the collection
    distractor_paragraphs: int | None = None  # at most this many paragraph lines of them (whole documents)
    retrievers: tuple[str, ...] = RETRIEVERS
    withhold: float = 0.5  # share of the articles left out of the no-answer collection (0: no no-answer cases)

    @property
    def active(self) -> bool:
        return self.documents is not None or self.collection

    def check(self) -> None:
        if self.documents is not None and (type(self.documents) is not int or not 1 <= self.documents <= 1000):
            raise ConfigError(f"--documents {self.documents!r}: the number of other articles, from 1 to 1000")
        if not self.retrievers or any(name not in RETRIEVERS for name in self.retrievers):
            raise ConfigError(f"--retrievers {','.join(self.retrievers)}: choose among {', '.join(RETRIEVERS)}")
        if len(set(self.retrievers)) != len(self.retrievers):
            raise ConfigError(f"--retrievers {','.join(self.retrievers)}: a retriever named twice")
        if (self.distractors or self.distractor_paragraphs is not None) and not self.collection:
            raise ConfigError("--distractors and --distractor-paragraphs add to the collection: give --collection")
        if self.distractor_paragraphs is not None and (type(self.distractor_paragraphs) is not int
                                                       or self.distractor_paragraphs < 1):
            raise ConfigError(f"--distractor-paragraphs {self.distractor_paragraphs!r}: a number of paragraph lines "
                              "≥ 1")
        if not 0 <= self.withhold < 1:
            raise ConfigError(f"--withhold {self.withhold!r}: a share of the articles, at least 0 and below 1")

    def settings(self) -> list[str]:
        return [name for name, on in (("documents", self.documents is not None), ("collection", self.collection))
                if on]


def open_label(model_label: str, setting: str, retriever: str, documents: int | None) -> str:
    """The report's name of a model asked in a setting with a retriever: "arabert-mini documents-5 bm25"."""
    return f"{model_label} {setting}-{documents} {retriever}" if setting == "documents" else \
        f"{model_label} {setting} {retriever}"


# ------------------------------------------------------------------------------------------------------ the inputs


def articles(examples: Sequence[dict]) -> dict[str, list[str]]:
    """Title → the article's paragraphs (distinct contexts), both in order of first appearance."""
    found: dict[str, list[str]] = {}
    for example in examples:
        paragraphs = found.setdefault(example["title"], [])
        if example["context"] not in paragraphs:
            paragraphs.append(example["context"])
    return found


def document_examples(examples: Sequence[dict], every: Sequence[dict], others: int, seed: int) -> list[dict]:
    """Each example asked of its article among `others` other articles of its set (`every`: all the set's questions,
    whose articles make the documents), as the module docstring says; "paragraph_start" is where its paragraph starts
    in the document, "paragraph" its text."""
    by_title = articles(every)
    titles = list(by_title)
    documents: dict[str, tuple[str, dict[str, int]]] = {}
    out = []
    for example in examples:
        title = example["title"]
        if title not in documents:
            rng = random.Random(f"{seed}:{title}")
            order = [title, *rng.sample([t for t in titles if t != title], min(others, len(titles) - 1))]
            rng.shuffle(order)
            parts: list[str] = []
            offsets: dict[str, int] = {}
            at = 0
            for name in order:
                for paragraph in by_title[name]:
                    if name == title:
                        offsets.setdefault(paragraph, at)
                    parts.append(paragraph)
                    at += len(paragraph) + 2
            documents[title] = ("\n\n".join(parts), offsets)
        text, offsets = documents[title]
        shift = offsets[example["context"]]
        out.append({**example, "context": text, "paragraph": example["context"], "paragraph_start": shift,
                    "answers": {"text": list(example["answers"]["text"]),
                                "answer_start": [start + shift for start in example["answers"]["answer_start"]]}})
    return out


@dataclasses.dataclass
class Corpus:
    """Documents (texts, ids, titles) and what they came from."""

    texts: list[str]
    ids: list[str]
    titles: list[str | None]
    description: dict[str, Any]


def distractor_documents(sources: Sequence[str], max_paragraphs: int | None) -> Corpus:
    """The documents of `sources` in order: an index directory's documents read back, files as `arabert-pipeline
    index` reads them (retrieval/inputs.py); at most `max_paragraphs` paragraph lines, whole documents."""
    from ..retrieval.index import Index
    from ..retrieval.inputs import read_documents

    texts: list[str] = []
    ids: list[str] = []
    titles: list[str | None] = []
    taken = 0
    pending: list[str] = []

    def add_files() -> None:
        nonlocal taken
        remaining = None if max_paragraphs is None else max_paragraphs - taken
        if pending and (remaining is None or remaining > 0):
            documents = read_documents(list(pending), max_paragraphs=remaining)
            texts.extend(documents.texts)
            ids.extend(documents.ids)
            titles.extend(documents.titles)
            taken += documents.paragraphs()
        pending.clear()

    for source in sources:
        if not Path(source).is_dir():
            pending.append(source)
            continue
        add_files()
        index = Index.open(source)
        for position in range(index.documents):
            if max_paragraphs is not None and taken >= max_paragraphs:
                break
            text = index.document_text(position)
            texts.append(text)
            ids.append(index.document_id(position))
            titles.append(index.document_title(position))
            taken += text.count("\n") + 1
    add_files()
    return Corpus(texts, ids, titles, {"sources": [portable_path(source) for source in sources],
                                       "documents": len(texts), "paragraph_lines": taken})


@dataclasses.dataclass
class Collection:
    """The collection asked, and the one without the withheld articles: each paragraph once, then the distractors."""

    full: Corpus
    position: dict[str, int]  # paragraph text → its document in `full`
    partial: Corpus | None  # without the withheld articles' paragraphs (None: nothing withheld)
    partial_position: dict[str, int]
    withheld: set[tuple[str, str]]  # (dataset, title)


def build_collection(sets: dict[str, list[dict]], distractors: Corpus, withhold: float, seed: int) -> Collection:
    """`sets`: dataset → all its questions. The withheld articles: a `withhold` share of all (dataset, title) pairs
    (one at least kept), drawn with a generator seeded by `seed`."""
    paragraphs: dict[str, tuple[str, str]] = {}  # text → (id, title), first occurrence
    owners: dict[str, set[tuple[str, str]]] = {}
    for key, examples in sets.items():
        for title, contexts in articles(examples).items():
            for number, text in enumerate(contexts):
                paragraphs.setdefault(text, (f"{key}:{title}#{number}", title))
                owners.setdefault(text, set()).add((key, title))
    pairs = sorted({pair for found in owners.values() for pair in found})
    order = np.random.default_rng(seed).permutation(len(pairs))
    # One article at least stays: a collection of nothing cannot be searched.
    withheld = {pairs[i] for i in order[: min(round(withhold * len(pairs)), len(pairs) - 1)]}

    def corpus(texts: list[str], what: str) -> tuple[Corpus, dict[str, int]]:
        titles: list[str | None] = [paragraphs[t][1] for t in texts]
        return (Corpus(texts + distractors.texts, [paragraphs[t][0] for t in texts] + distractors.ids,
                       titles + distractors.titles,
                       {"paragraphs": len(texts), "distractor_documents": len(distractors.texts), "what": what}),
                {text: i for i, text in enumerate(texts)})

    full, position = corpus(list(paragraphs), "every paragraph of the sets")
    if not withheld:
        return Collection(full, position, None, {}, withheld)
    # A paragraph stays if any article holding it stays.
    kept = [text for text in paragraphs if not owners[text] <= withheld]
    partial, partial_position = corpus(kept, "the paragraphs of the articles not withheld")
    return Collection(full, position, partial, partial_position, withheld)


# ------------------------------------------------------------------------------------------------------- asking


@dataclasses.dataclass
class Asked:
    """One question asked in one setting of one retriever."""

    hits: list[Hit]  # the first DEPTH passages retrieved
    reads: list[PassageRead]  # the first max(passages) read
    whole: list[Answer] | None  # a document of at most long_context_windows windows: its answers, read whole
    retrieval_ms: float  # building a document's index and the search
    read_ms: dict[int, float]  # passages read → ms reading them (the first n)
    check_ms: float = 0.0  # the long-context check of a document

    def choose(self, passages: int, null_weight: float) -> tuple[Answer | None, PassageRead | None]:
        """The answer of `passages` read and weighed with `null_weight` (and the passage chosen)."""
        from ..qa.transformer.passages import chosen_answers

        if self.whole is not None:
            return (self.whole[0] if self.whole else None), None
        chosen, best = chosen_answers(self.reads[:passages], null_weight, 1)
        return (chosen[0][0] if chosen else None), best

    def ms(self, passages: int) -> float:
        if self.whole is not None:
            return self.check_ms + self.read_ms[0]
        return self.check_ms + self.retrieval_ms + self.read_ms[passages]


def grid_passages(model: QAModel) -> list[int]:
    return sorted({*GRID_PASSAGES, model.settings.passages_read})


def grid_null_weights(model: QAModel) -> list[float]:
    return sorted({*GRID_NULL_WEIGHTS, model.settings.passage_null_weight})


def read_slices(model: QAModel, question: str, hits: list[Hit], batch_size: int) -> tuple[list[PassageRead],
                                                                                           dict[int, float]]:
    """The first max(grid) hits read, a slice per grid count, each timed: (reads, n → ms of reading the first n)."""
    from ..qa.transformer.passages import read_hits

    reads: list[PassageRead] = []
    read_ms = {0: 0.0}
    done, spent = 0, 0.0
    for count in grid_passages(model):
        if count > done and done < len(hits):
            started = time.perf_counter()
            reads += read_hits(model, [question], [hits[done:count]], batch_size, top_k=1)[0]
            spent += 1000 * (time.perf_counter() - started)
        done = count
        read_ms[count] = spent
    return reads, read_ms


def ask_document(model: QAModel, example: dict, ranker: Callable[[str], Retriever], build_ms: float,
                 batch_size: int) -> Asked:
    """`example` (a documents example) as `QAModel.predict` answers it, its passages ranked by `ranker`'s retriever
    of the document (built in `build_ms`)."""
    from ..qa.transformer.passages import leading_passages, read_by_passages

    started = time.perf_counter()
    prepared = model.prepare([example])
    windows = model.windows(prepared)
    long = bool(read_by_passages(model, prepared, windows)[0])
    check_ms = 1000 * (time.perf_counter() - started)
    retriever = ranker(example["context"])
    started = time.perf_counter()
    hits = retriever.search(example["question"], DEPTH)
    retrieval_ms = build_ms + 1000 * (time.perf_counter() - started)
    if not long:
        started = time.perf_counter()
        whole = model.predict_prepared([example], prepared, windows, batch_size, 1)[0][0]
        return Asked(hits, [], whole, retrieval_ms, {0: 1000 * (time.perf_counter() - started)}, check_ms)
    settings = model.settings
    # As predict: a question sharing no term with any passage has the document's first passages read.
    read = hits or leading_passages(example["context"], settings.passage_chars, max(grid_passages(model)))
    reads, read_ms = read_slices(model, example["question"], read, batch_size)
    return Asked(hits, reads, None, retrieval_ms, read_ms, check_ms)


def ask_collection(model: QAModel, retriever: Retriever, question: str, batch_size: int) -> Asked:
    """`question` as `Pipeline.answer(question, index=...)` answers it, with `retriever`'s hits."""
    started = time.perf_counter()
    hits = retriever.search(question, DEPTH)
    retrieval_ms = 1000 * (time.perf_counter() - started)
    reads, read_ms = read_slices(model, question, hits, batch_size)
    return Asked(hits, reads, None, retrieval_ms, read_ms)


# ------------------------------------------------------------------------------------------------------ scoring


def _cell(passages: int, null_weight: float) -> str:
    return f"{passages}/{null_weight:g}"


class OpenRun:
    """The documents and collections of one `evaluate` run, built once and asked by every model."""

    def __init__(self, options: OpenOptions, sets: dict[str, list[dict]], seed: int, batch_size: int, log=print):
        self.options, self.sets, self.seed, self.batch_size, self.log = options, sets, seed, batch_size, log
        self.collection: Collection | None = None
        self.retrievers: dict[str, Retriever] = {}
        self.partial_retrievers: dict[str, Retriever] = {}
        self.description: dict[str, Any] = {}
        if options.collection:
            self._build_collections()

    def _build_collections(self) -> None:
        options = self.options
        distractors = distractor_documents(options.distractors, options.distractor_paragraphs) \
            if options.distractors else Corpus([], [], [], {"documents": 0, "paragraph_lines": 0})
        collection = build_collection(self.sets, distractors, options.withhold, self.seed)
        self.collection = collection
        self.description = {"distractors": distractors.description, "documents": len(collection.full.texts),
                            "paragraphs": len(collection.position), "withheld_articles": len(collection.withheld),
                            "articles": len({(key, e["title"]) for key, examples in self.sets.items()
                                             for e in examples}),
                            "passages": {}, "build_seconds": {}}
        for name in options.retrievers:
            for corpus, target in ((collection.full, self.retrievers), (collection.partial, self.partial_retrievers)):
                if corpus is None:
                    continue
                started = time.perf_counter()
                target[name] = build_retriever(name, corpus.texts, corpus.ids, corpus.titles)
                seconds = time.perf_counter() - started
                if target is self.retrievers:
                    self.description["passages"][name] = len(target[name])
                    self.description["build_seconds"][name] = round(seconds, 2)
                    self.log(f"collection: {len(corpus.texts):,} documents, {len(target[name]):,} passages "
                             f"({name}, {seconds:.1f} s)")

    # ---------------------------------------------------------------------------------------- one system's records

    def records(self, model: QAModel, setting: str, retriever: str, key: str, examples: list[dict]
                ) -> tuple[list[dict], list[dict]]:
        """Per question of `examples` (dataset `key`), asked in `setting` of `retriever`: its record (the fields of a
        paragraph-given record, the answer scored against the paragraph, plus the retrieval's and the grid's); and
        the no-answer records of the collection's withheld articles."""
        if setting == "documents":
            return self._documents(model, retriever, key, examples), []
        return self._collection(model, retriever, key, examples)

    def _documents(self, model: QAModel, retriever: str, key: str, examples: list[dict]) -> list[dict]:
        chars = model.settings.passage_chars
        built: dict[str, tuple[Retriever, float]] = {}

        def ranker(text: str) -> Retriever:
            return built[text][0]

        records = []
        for example in document_examples(examples, self.sets[key], self.options.documents or 0, self.seed):
            text = example["context"]
            if text not in built:
                built.clear()  # one document's index at a time: the questions come article by article
                started = time.perf_counter()
                index = build_retriever(retriever, [text], passage_chars=chars)
                built[text] = (index, 1000 * (time.perf_counter() - started))
            asked = ask_document(model, example, ranker, built[text][1], self.batch_size)
            start = example["answers"]["answer_start"][0]
            rank = next((r for r, hit in enumerate(asked.hits, 1) if hit.passage.start <= start < hit.passage.end),
                        None)
            shift, length = example["paragraph_start"], len(example["paragraph"])

            def in_paragraph(answer: Answer, read: PassageRead | None, shift=shift, length=length) -> int | None:
                return answer.start - shift if shift <= answer.start and answer.end <= shift + length else None

            def gold(read: PassageRead, start=start) -> bool:
                return read.hit.passage.start <= start < read.hit.passage.end

            records.append({**self._record(model, example, asked, rank, in_paragraph, gold, len(text)),
                            "document": None})
        return records

    def _collection(self, model: QAModel, retriever: str, key: str, examples: list[dict]
                    ) -> tuple[list[dict], list[dict]]:
        assert self.collection is not None
        collection = self.collection
        search = self.retrievers[retriever]
        records = []
        for example in examples:
            asked = ask_collection(model, search, example["question"], self.batch_size)
            document = collection.position[example["context"]]
            rank = next((r for r, hit in enumerate(asked.hits, 1) if hit.passage.document == document), None)

            def in_paragraph(answer: Answer, read: PassageRead | None, document=document) -> int | None:
                return answer.start if read is not None and read.hit.passage.document == document else None

            def gold(read: PassageRead, document=document) -> bool:
                return read.hit.passage.document == document

            records.append(self._record(model, example, asked, rank, in_paragraph, gold, len(example["context"])))
        negatives = []
        partial = self.partial_retrievers.get(retriever)
        if partial is not None:
            settings = model.settings
            for example in examples:
                if (key, example["title"]) not in collection.withheld or \
                        example["context"] in collection.partial_position:
                    continue
                asked = ask_collection(model, partial, example["question"], self.batch_size)
                answer, best = asked.choose(settings.passages_read, settings.passage_null_weight)
                negatives.append({"id": example["id"], "null_margin": None if best is None else best.null_margin,
                                  "prediction": None if answer is None or best is None else answer.text,
                                  "document": None if best is None else best.hit.document,
                                  "ms": asked.ms(settings.passages_read)})
        return records, negatives

    def _record(self, model: QAModel, example: dict, asked: Asked, rank: int | None,
                in_paragraph: Callable[[Answer, PassageRead | None], int | None],
                gold: Callable[[PassageRead], bool], characters: int) -> dict:
        settings = model.settings
        paragraph_example = {**example, "context": example.get("paragraph", example["context"]),
                             "answers": _paragraph_answers(example)}
        scored: dict[tuple[str | None, int | None], dict] = {}

        def score(answer: Answer | None, read: PassageRead | None) -> tuple[dict, int | None]:
            text = None if answer is None else answer.text
            start = None if answer is None else in_paragraph(answer, read)
            if (text, start) not in scored:
                predictions = {} if text is None else {example["id"]: (text, start)}
                scored[(text, start)] = score_system([paragraph_example], predictions)[0]
            return scored[(text, start)], start

        answer, best = asked.choose(settings.passages_read, settings.passage_null_weight)
        record, _ = score(answer, best)
        grid = {}
        for passages in grid_passages(model):
            for weight in grid_null_weights(model):
                cell, _ = score(*asked.choose(passages, weight))
                grid[_cell(passages, weight)] = [cell[key] for key in GRID_KEYS]
        whole = asked.whole is not None  # the whole context, the gold paragraph in it, was read
        return {**record, "characters": characters, "read_whole": whole,
                "document": None if best is None else best.hit.document, "gold_rank": rank,
                "gold_read": whole or any(gold(r) for r in asked.reads[:settings.passages_read]),
                "gold_chosen": whole or (best is not None and gold(best)),
                "null_margin": None if best is None else best.null_margin,
                "retrieval_ms": asked.retrieval_ms, "ms": asked.ms(settings.passages_read),
                "grid": grid, "grid_ms": {str(n): asked.ms(n) for n in grid_passages(model)}}


def _paragraph_answers(example: dict) -> dict:
    shift = example.get("paragraph_start", 0)
    return {"text": example["answers"]["text"], "answer_start": [s - shift for s in example["answers"]["answer_start"]]}


# ---------------------------------------------------------------------------------------------------- summaries


def _ci(values: np.ndarray, resamples: int, seed: int) -> dict[str, float]:
    ci = metrics.bootstrap_ci(np.asarray(values, dtype=float)[:, None], resamples=resamples, seed=seed)
    return {"mean": float(ci["mean"][0]), "low": float(ci["low"][0]), "high": float(ci["high"][0])}


def _timing(values: Sequence[float]) -> dict[str, float]:
    return {"mean": float(statistics.fmean(values)), "p50": float(statistics.median(values))}


def paired_vs_paragraph(records: list[dict], oracle: list[dict], resamples: int, seed: int) -> dict:
    """Per score: this system − the paragraph-given answers to the same questions (×100), its 95% CI and paired
    bootstrap p-value; EM also the exact McNemar p."""
    scores = np.array([[r[key] for key in metrics.SCORE_KEYS] for r in records], dtype=float)
    given = np.array([[r[key] for key in metrics.SCORE_KEYS] for r in oracle], dtype=float)
    paired = metrics.paired_bootstrap(scores, given, resamples=resamples, seed=seed)
    out = {key: {name: float(paired[name][i]) for name in ("diff", "low", "high", "p_value")}
           for i, key in enumerate(metrics.SCORE_KEYS)}
    for key in ("soqal_em", "arabic_em"):
        column = metrics.SCORE_KEYS.index(key)
        out[key]["mcnemar_p"] = metrics.mcnemar_exact(scores[:, column], given[:, column])
    return out


def open_summary(records: list[dict], oracle: list[dict], model: QAModel, resamples: int, seed: int) -> dict:
    """Recall, times and the grid of one open system's records (`oracle`: the paragraph-given records of the same
    questions, whose times the ratios divide by)."""
    if not records:
        raise InputError("no questions asked")
    settings = model.settings
    recall = {f"@{k}": _ci(np.array([r["gold_rank"] is not None and r["gold_rank"] <= k for r in records]),
                           resamples, seed) for k in RECALL_AT}
    recall["read"] = _ci(np.array([r["gold_read"] for r in records]), resamples, seed)
    recall["chosen"] = _ci(np.array([r["gold_chosen"] for r in records]), resamples, seed)
    paragraph_ms = statistics.fmean(r["ms"] for r in oracle) if oracle and all("ms" in r for r in oracle) else None
    end_to_end = _timing([r["ms"] for r in records])
    own = _cell(settings.passages_read, settings.passage_null_weight)
    base = np.array([r["grid"][own] for r in records], dtype=float)
    grid = []
    for cell in records[0]["grid"]:
        passages, weight = cell.split("/")
        scores = np.array([r["grid"][cell] for r in records], dtype=float)
        paired = metrics.paired_bootstrap(scores[:, 1:2], base[:, 1:2], resamples=resamples, seed=seed)
        grid.append({"passages_read": int(passages), "null_weight": float(weight),
                     "soqal_f1": _ci(scores[:, 1], resamples, seed),
                     "soqal_em": 100 * float(scores[:, 0].mean()), "arabic_f1": 100 * float(scores[:, 2].mean()),
                     "ms": float(statistics.fmean(r["grid_ms"][passages] for r in records)),
                     "vs_model": {name: float(paired[name][0]) for name in ("diff", "low", "high", "p_value")}})
    return {"questions": len(records), "characters": float(statistics.fmean(r["characters"] for r in records)),
            "read_whole": sum(r["read_whole"] for r in records), "recall": recall,
            "ms": {"retrieval": _timing([r["retrieval_ms"] for r in records]), "end_to_end": end_to_end,
                   "paragraph": paragraph_ms,
                   "ratio": None if not paragraph_ms else end_to_end["mean"] / paragraph_ms},
            "passages_read": settings.passages_read, "passage_null_weight": settings.passage_null_weight,
            "grid": grid}


def no_answer_summary(records: list[dict], negatives: list[dict], threshold: float, resamples: int,
                      seed: int) -> dict | None:
    """Answerable questions and questions only no answer is right for, answered with allow_no_answer: no answer where
    the (chosen passage's) null margin passes `threshold`; a margin of None (nothing read or decoded) is no answer at
    any threshold. At the model's threshold, and the curve of thresholds keeping KEEP_ANSWERED of the answerable.
    Used for a collection (answerable questions asked of it whole, withheld articles' questions) and for paragraphs
    (report.py: the --data questions, a --no-answer-data set's unanswerable ones)."""
    if not negatives:
        return None
    margins = np.array([np.inf if r["null_margin"] is None else r["null_margin"] for r in records])
    absent = np.array([np.inf if r["null_margin"] is None else r["null_margin"] for r in negatives])
    f1 = {variant: np.array([r[f"{variant}_f1"] for r in records]) for variant in metrics.VARIANTS}

    def at(cut: float) -> dict:
        answered = margins <= cut
        return {"threshold": float(cut), "answered": 100 * float(answered.mean()),
                "has_ans_f1": {variant: 100 * float((f1[variant] * answered).mean()) for variant in f1},
                "no_ans_accuracy": _ci(absent > cut, resamples, seed)}

    finite = margins[np.isfinite(margins)]
    curve = [{"keep": keep, **at(float(np.quantile(finite, keep, method="higher")))} for keep in KEEP_ANSWERED
             if len(finite)]
    return {"answerable": len(records), "unanswerable": len(negatives), "at_model_threshold": at(threshold),
            "curve": curve}
