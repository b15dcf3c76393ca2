"""SQuAD v1.1 JSON ⇄ `datasets.Dataset`, and the registry of Arabic QA sets.

    load_squad("arcd-test")                        # a registered name, resolved under artifacts.paths.data_root()
    load_squad("my/file.json", misaligned="skip")  # a local file; misaligned answers dropped, counted and logged
    read_squad("arcd-train", misaligned="skip").misaligned   # the ids that were dropped

One row per question: id, title, context, question, answers{text, answer_start}. A file that is not valid SQuAD v1.1
raises InputError naming the file and the question id. ARCD has 6 answers whose text is not in the context at
`answer_start` (nor anywhere in it): by default that is an error too; `misaligned="skip"` drops those answers (and a
question left without answers), `misaligned="keep"` keeps them (evaluation scores every question against its gold
texts, so an evaluation set keeps them). Either way the ids are reported, never dropped silently.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..artifacts.paths import DATA_ROOT_ENV, data_root
from ..artifacts.reads import MAX_DATA_FILE_BYTES, check_input_file, parse_json
from ..artifacts.writes import atomic_write
from ..errors import ConfigError, DataNotFoundError, InputError
from ..weights.files import file_digest, read_text_file

log = logging.getLogger(__name__)

MISALIGNED_POLICIES = ("error", "skip", "keep")

_SOQAL = "https://raw.githubusercontent.com/husseinmozannar/SOQAL/1229d34aa2b7a0b9a2e4858c9268e68f45d7e3c4/data/"
# TyDiQA-GoldP dev and MLQA dev ship upstream as archives (storage.googleapis.com/tydiqa, dl.fbaipublicfiles.com/MLQA);
# this SOQAL fork holds the Arabic files byte-identical as plain JSON, so no archive handling is needed.
_SOQAL_FORK = "https://raw.githubusercontent.com/fbsx503/SOQAL/a6edbb9317e7a52822cef257b28ec737bcb70ef7/data/"
_XQUAD = "https://raw.githubusercontent.com/google-deepmind/xquad/7d30520c717524000f0d9d2f9c10a069acd9d285/"


@dataclasses.dataclass(frozen=True)
class RegisteredSet:
    relative: str  # path under data_root()
    url: str | None  # None: no single file to download (the message says how to build it)
    license: str
    note: str = ""  # said whenever the set is read: what a user of it must know
    unanswerable: bool = False  # SQuAD 2.0 negatives only: read by read_unanswerable, never by read_squad


@dataclasses.dataclass(frozen=True)
class ArticleSplit:
    """Part of a registered set, split by article so that no paragraph of one part's articles is in the other."""

    base: str
    part: str  # "dev": `fraction` of the articles drawn with `seed`; "rest": the others
    fraction: float = 0.2
    seed: int = 0

    def titles(self, examples: list[dict[str, Any]]) -> set[str]:
        import numpy as np

        titles = sorted({example["title"] for example in examples})
        order = np.random.default_rng(self.seed).permutation(len(titles))
        dev = {titles[i] for i in order[: round(self.fraction * len(titles))]}
        return dev if self.part == "dev" else set(titles) - dev


REGISTRY: dict[str, RegisteredSet] = {
    "arcd": RegisteredSet("qa/arcd.json", _SOQAL + "arcd.json", "MIT"),
    "arcd-train": RegisteredSet("qa/arcd-train.json", _SOQAL + "arcd-train.json", "MIT"),
    "arcd-test": RegisteredSet("qa/arcd-test.json", _SOQAL + "arcd-test.json", "MIT"),
    "arabic-squad": RegisteredSet("qa/Arabic-SQuAD.json", _SOQAL + "Arabic-SQuAD.json", "MIT"),
    "xquad-ar": RegisteredSet("qa/xquad.ar.json", _XQUAD + "xquad.ar.json", "CC BY-SA 4.0"),
    "tydiqa-goldp-ar-dev": RegisteredSet(
        "qa/tydiqa-goldp-dev-arabic.json", _SOQAL_FORK + "tydiqa-goldp-dev-arabic.json", "Apache-2.0"
    ),
    "mlqa-ar-dev": RegisteredSet(
        "qa/mlqa-dev-context-ar-question-ar.json", _SOQAL_FORK + "MLQA-dev-context-ar-question-ar.json", "CC BY-SA 3.0"
    ),
    # Opt-in only (no protocol uses it): the answers were located automatically and some are wrong, and the authors
    # state no licence. Its contexts are Arabic Wikipedia (CC BY-SA upstream).
    "aqad": RegisteredSet(
        "qa/aqad-answerable.json", None, "none stated (research use only)",
        note="AQAD (Atef et al. 2020): answers located automatically (noisy), no licence stated: research use only. "
        "Build qa/aqad-answerable.json from the answerable questions of github.com/EmanElrefai/AAQAD "
        "(AAQAD-v1.0 shards, ids renamed aqad-<shard>-<id>).",
    ),
    # AQAD's questions marked is_impossible, with the Wikipedia paragraph each was written against (SQuAD 2.0's way):
    # the negatives a reader's no-answer threshold is measured on (`evaluate --no-answer-data`).
    "aqad-unanswerable": RegisteredSet(
        "qa/aqad-unanswerable.json", None, "none stated (research use only)",
        note="AQAD (Atef et al. 2020), its unanswerable questions: no licence stated, research use only. Build "
        "qa/aqad-unanswerable.json from the questions marked is_impossible in github.com/EmanElrefai/AAQAD "
        "(AAQAD-v1.0 shards, ids renamed aqad-<shard>-<id>).",
        unanswerable=True,
    ),
}

# Dev splits: every choice of recipe and checkpoint is made on these, never on arcd-test or TyDiQA dev.
SPLITS: dict[str, ArticleSplit] = {
    "arcd-dev": ArticleSplit("arcd-train", "dev"),  # 15 of ARCD-train's 77 articles (seed 0)
    "arcd-train-rest": ArticleSplit("arcd-train", "rest"),  # ARCD-train without the arcd-dev articles
}


@dataclasses.dataclass
class SquadFile:
    """The questions of one file, and the answers whose `answer_start` does not point at their text."""

    name: str  # registry name, or the path as given
    path: Path
    examples: list[dict[str, Any]]
    misaligned: list[dict[str, Any]]  # {"id", "text", "answer_start"}, skipped or kept according to the policy
    policy: str

    def content_digest(self) -> str:
        return content_digest(self.path, self.name)

    def describe_misaligned(self) -> str:
        what = {"skip": "skipped", "keep": "kept", "error": "found"}[self.policy]
        ids = ", ".join(m["id"] for m in self.misaligned)
        return f"{self.name}: {what} {len(self.misaligned)} misaligned answer(s) (question ids: {ids})"


# The key of a set's content digest in a model's "training_data" entries (qa/transformer/finetune.py writes them).
DIGEST_KEY = "sha256"


def content_digest(path: str | Path, name: str | None = None) -> str:
    """What a set is, however it was named or its path spelt: the SHA-256 of its file's bytes, and for a registered
    split (`name` in SPLITS: part of a file's articles) which part, since arcd-dev and arcd-train-rest share a file."""
    return _part_digest(file_digest(path), name)


def _part_digest(digest: str, name: str | None) -> str:
    split = SPLITS.get(str(name))
    if split is None:
        return digest
    return hashlib.sha256(json.dumps([digest, dataclasses.asdict(split)], sort_keys=True).encode()).hexdigest()


def sets_trained_on(training_data: Any, files: list[SquadFile]) -> list[str]:
    """The names of `files` that share an article with a model's recorded training data (its metadata
    "training_data"), compared by content: `xquad-ar`, its path and `./qa/../qa/xquad.ar.json` are one set, and
    arcd-dev overlaps arcd-train (the whole file holds its articles) as arcd-train overlaps arcd-train-rest. An entry
    written before digests were recorded is compared by the digest of the file its path names when that file is here,
    else by its name."""
    digests, names = set(), set()
    for entry in training_data if isinstance(training_data, list) else []:
        if not isinstance(entry, dict):
            continue
        recorded = entry.get(DIGEST_KEY)
        if not isinstance(recorded, str):
            local = _recorded_file(entry.get("path"))
            recorded = content_digest(local, entry.get("name")) if local is not None else None
        if recorded is not None:
            digests.add(recorded)
        else:
            names.add(entry.get("name"))
    overlapping = set()
    for f in files:
        # A recorded digest names a whole file or one split of it; the splits are by article, so two sets drawn from
        # one file overlap exactly when their article titles do. Each dev file's parts are expanded to compare.
        parts = _file_parts(f.path)
        mine = parts.get(content_digest(f.path, f.name), set())
        trained = set().union(*(parts[d] for d in digests if d in parts))
        if f.name in names or mine & trained:
            overlapping.add(f.name)
    return sorted(overlapping)


def _file_parts(path: Path) -> dict[str, set[str]]:
    """Every digest a set drawn from the file at `path` may be recorded by (the whole file, each registered split of
    it) → the titles of the articles that set holds."""
    text = read_text_file(path, max_bytes=MAX_DATA_FILE_BYTES, bom=True)
    examples, _ = _parse_squad(text, path, str(path), "keep")
    digest = file_digest(path)
    parts = {digest: {e["title"] for e in examples}}
    for name, split in SPLITS.items():
        parts[_part_digest(digest, name)] = split.titles(examples)
    return parts


def _recorded_file(recorded: Any) -> Path | None:
    """The file a portable path (artifacts.paths.portable_path) names on this machine, if it is here."""
    if not isinstance(recorded, str) or not recorded:
        return None
    prefix = f"${DATA_ROOT_ENV}/"
    path = data_root() / recorded[len(prefix):] if recorded.startswith(prefix) else Path(recorded)
    return path if path.is_file() else None


def resolve(source: str | Path, *, download: bool = False) -> Path:
    """A registered name or a local path → an existing file (downloaded first when asked and possible)."""
    path = Path(source).expanduser()
    if path.is_file():
        return path
    name = str(source)
    if name in SPLITS:
        return resolve(SPLITS[name].base, download=download)
    if name not in REGISTRY:
        if os.path.exists(path):  # a FIFO, a device, a directory: not "no such file"
            check_input_file(path, "SQuAD file")
        if path.suffix or "/" in name or "\\" in name:
            raise DataNotFoundError(f"{path}: no such file")
        raise ConfigError(f"unknown QA dataset {name!r}: use a file path or one of {', '.join(dataset_names())}")
    entry = REGISTRY[name]
    target = data_root() / entry.relative
    if target.is_file():
        return target
    if not download or entry.url is None:
        if entry.url is None:
            raise DataNotFoundError(f"dataset {name!r} not found at {target}. {entry.note}")
        raise DataNotFoundError(
            f"dataset {name!r} not found at {target}. Download {entry.url} to that path, point ${DATA_ROOT_ENV} "
            f"at a folder holding {entry.relative}, or ask for the download (download=True / --download)."
        )
    _download(name, entry.url, target)
    return target


def _download(name: str, url: str, target: Path) -> None:
    log.info("downloading %s from %s", name, url)
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            payload = response.read()
    except (urllib.error.URLError, OSError) as exc:
        raise DataNotFoundError(
            f"dataset {name!r}: download from {url} failed ({exc}); put the file at {target} by hand"
        ) from exc
    # Validate before anything lands at the target, so a truncated or HTML error page never looks like data.
    _parse_squad(payload.decode("utf-8-sig"), url, name, "keep")
    with atomic_write(target, "wb") as f:
        f.write(payload)


def read_squad(source: str | Path, *, misaligned: str = "error", download: bool = False) -> SquadFile:
    """Parse and validate one SQuAD v1.1 file into example dicts (see the module docstring for `misaligned`)."""
    if misaligned not in MISALIGNED_POLICIES:
        raise ConfigError(f"misaligned={misaligned!r}: use one of {', '.join(MISALIGNED_POLICIES)}")
    entry = REGISTRY.get(str(source))
    if entry is not None and entry.unanswerable:
        raise ConfigError(f"{source!r} holds only unanswerable questions: it measures a no-answer threshold "
                          "(evaluate --no-answer --no-answer-data), it cannot be scored or trained on as SQuAD v1.1")
    path = resolve(source, download=download)
    text = read_text_file(path, max_bytes=MAX_DATA_FILE_BYTES, bom=True)
    examples, bad = _parse_squad(text, path, str(source), misaligned)
    split = SPLITS.get(str(source))
    if split is not None:
        titles = split.titles(examples)
        examples = [e for e in examples if e["title"] in titles]
        kept = {e["id"] for e in examples}
        bad = [b for b in bad if b["id"] in kept]
    if entry is not None and entry.note:
        log.warning(entry.note)
    return SquadFile(str(source), path, examples, bad, misaligned)


def read_unanswerable(source: str | Path) -> list[dict[str, Any]]:
    """The unanswerable questions of a SQuAD 2.0 file or registered name (`is_impossible: true`, no answers), as
    example dicts with empty answers: the questions on which only no answer is right. The file's answerable questions
    are left out; a question marked impossible that carries answers, or a file with no unanswerable question, is an
    InputError naming it."""
    path = resolve(source)
    root = parse_json(read_text_file(path, max_bytes=MAX_DATA_FILE_BYTES, bom=True), path=path)
    articles = _expect(root, dict, path, "top level", "an object").get("data")
    _expect(articles, list, path, "data", "a list of articles")
    examples: list[dict[str, Any]] = []
    seen: set[str] = set()
    for a, article in enumerate(articles):
        _expect(article, dict, path, f"data[{a}]", "an object")
        title = _expect(article.get("title", ""), str, path, f"data[{a}].title", "a string")
        for p, paragraph in enumerate(_expect(article.get("paragraphs"), list, path, f"data[{a}].paragraphs",
                                              "a list")):
            where = f"data[{a}].paragraphs[{p}]"
            _expect(paragraph, dict, path, where, "an object")
            context = _expect(paragraph.get("context"), str, path, f"{where}.context", "a string")
            for q, qa in enumerate(_expect(paragraph.get("qas"), list, path, f"{where}.qas", "a list")):
                _expect(qa, dict, path, f"{where}.qas[{q}]", "an object")
                impossible = qa.get("is_impossible", False)
                _expect(impossible, bool, path, f"{where}.qas[{q}].is_impossible", "true or false")
                if not impossible:
                    continue
                qid, question = qa.get("id"), qa.get("question")
                if not isinstance(qid, (str, int)) or isinstance(qid, bool) or str(qid) == "" or str(qid) in seen:
                    raise InputError("missing, invalid or duplicate question id", path=path, field=f"{where}.qas[{q}]")
                if not isinstance(question, str) or not question.strip():
                    raise InputError("missing or empty 'question'", path=path, field=f"question {qid}")
                if qa.get("answers"):
                    raise InputError("marked is_impossible but has answers", path=path, field=f"question {qid}")
                if not context.strip():
                    raise InputError("empty context", path=path, field=f"{where}.context")
                seen.add(str(qid))
                examples.append({"id": str(qid), "title": title, "context": context, "question": question,
                                 "answers": {"text": [], "answer_start": []}})
    if not examples:
        raise InputError("no unanswerable question (none marked is_impossible: true)", path=path)
    entry = REGISTRY.get(str(source))
    if entry is not None and entry.note:
        log.warning(entry.note)
    return examples


def unanswerable_examples(examples: list[dict[str, Any]], seed: int = 0) -> list[dict[str, Any]]:
    """SQuAD 2.0-style negatives: each question paired with another paragraph of its article that holds none of its
    answers (id `ID-no-answer`, no answers); a question whose article has no such paragraph gets none.

    Harder than a paragraph of another article: the same topic and names, only the answer missing. The paragraph is
    drawn with a generator seeded by `seed`, the same on every run.
    """
    import numpy as np

    contexts_by_title: dict[str, list[str]] = {}
    for example in examples:
        found = contexts_by_title.setdefault(example["title"], [])
        if example["context"] not in found:
            found.append(example["context"])
    rng = np.random.default_rng(seed)
    negatives = []
    for example in examples:
        others = [c for c in contexts_by_title[example["title"]] if c != example["context"]
                  and not any(text and text in c for text in example["answers"]["text"])]
        if others:
            negatives.append({**example, "id": f"{example['id']}-no-answer",
                              "context": others[rng.integers(len(others))],
                              "answers": {"text": [], "answer_start": []}})
    return negatives


def dataset_names() -> list[str]:
    return [*REGISTRY, *SPLITS]


def dataset_license(name: str) -> str | None:
    entry = REGISTRY.get(SPLITS[name].base if name in SPLITS else name)
    return entry.license if entry else None


def load_squad(source: str | Path, *, misaligned: str = "error", download: bool = False):
    """A SQuAD v1.1 file or registered name as a `datasets.Dataset` with one row per question.

    Misaligned answers skipped or kept are reported as a logging warning (`read_squad` returns them).
    """
    squad = read_squad(source, misaligned=misaligned, download=download)
    if squad.misaligned:
        log.warning(squad.describe_misaligned())
    return to_dataset(squad.examples)


def to_dataset(examples: list[dict[str, Any]]):
    import datasets

    features = datasets.Features(
        {
            "id": datasets.Value("string"),
            "title": datasets.Value("string"),
            "context": datasets.Value("string"),
            "question": datasets.Value("string"),
            "answers": {
                "text": datasets.List(datasets.Value("string")),
                "answer_start": datasets.List(datasets.Value("int32")),
            },
        }
    )
    return datasets.Dataset.from_list(examples, features=features)


def _parse_squad(text: str, path: object, name: str, policy: str) -> tuple[list[dict], list[dict]]:
    try:
        root = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"invalid JSON: {exc.msg} (column {exc.colno})", path=path, line=exc.lineno) from exc
    except (ValueError, RecursionError):  # an integer too long, nesting too deep: parse_json's error names which
        parse_json(text, path=path)
        raise
    articles = _expect(root, dict, path, "top level", "an object").get("data")
    _expect(articles, list, path, "data", "a list of articles")
    examples: list[dict[str, Any]] = []
    bad: list[dict[str, Any]] = []
    seen: set[str] = set()
    for a, article in enumerate(articles):
        where = f"data[{a}]"
        _expect(article, dict, path, where, "an object")
        title = article.get("title", "")
        _expect(title, str, path, f"{where}.title", "a string")
        _expect(article.get("paragraphs"), list, path, f"{where}.paragraphs", "a list")
        for p, paragraph in enumerate(article["paragraphs"]):
            where = f"data[{a}].paragraphs[{p}]"
            _expect(paragraph, dict, path, where, "an object")
            context = paragraph.get("context")
            _expect(context, str, path, f"{where}.context", "a string")
            _expect(paragraph.get("qas"), list, path, f"{where}.qas", "a list")
            if not context.strip() and paragraph["qas"]:
                raise InputError("empty context", path=path, field=f"{where}.context")
            for q, qa in enumerate(paragraph["qas"]):
                _expect(qa, dict, path, f"{where}.qas[{q}]", "an object")
                example = _parse_question(qa, context, title, path, f"{where}.qas[{q}]", policy, bad, seen)
                if example is not None:
                    examples.append(example)
    if not examples:
        raise InputError("no questions", path=path)
    return examples, bad


def _parse_question(qa, context, title, path, where, policy, bad, seen) -> dict | None:
    qid = qa.get("id")
    if not isinstance(qid, (str, int)) or isinstance(qid, bool) or str(qid) == "":
        raise InputError("missing or invalid question id", path=path, field=f"{where}.id")
    qid = str(qid)
    field = f"question {qid}"
    if qid in seen:
        raise InputError("duplicate question id", path=path, field=field)
    seen.add(qid)
    question = qa.get("question")
    if not isinstance(question, str) or not question.strip():
        raise InputError("missing or empty 'question'", path=path, field=field)
    answers = qa.get("answers")
    if not isinstance(answers, list) or not answers:
        raise InputError("missing or empty 'answers' (SQuAD v1.1 needs at least one)", path=path, field=field)
    texts, starts = [], []
    for i, answer in enumerate(answers):
        if not isinstance(answer, dict):
            raise InputError(f"answers[{i}] is not an object", path=path, field=field)
        text, start = answer.get("text"), answer.get("answer_start")
        if not isinstance(text, str) or not text.strip():
            raise InputError(f"answers[{i}].text missing or empty", path=path, field=field)
        if not isinstance(start, int) or isinstance(start, bool) or start < 0:
            raise InputError(f"answers[{i}].answer_start missing or not a non-negative integer", path=path, field=field)
        if context[start : start + len(text)] != text:
            if policy == "error":
                found = context[start : start + len(text)]
                raise InputError(
                    f"answers[{i}].answer_start {start} does not match the text: the context there reads {found!r}, "
                    f"the answer is {text!r} (misaligned=\"skip\" or --skip-misaligned drops such answers, counted)",
                    path=path,
                    field=field,
                )
            bad.append({"id": qid, "text": text, "answer_start": start})
            if policy == "skip":
                continue
        texts.append(text)
        starts.append(start)
    if not texts:
        return None
    return {
        "id": qid,
        "title": title,
        "context": context,
        "question": question,
        "answers": {"text": texts, "answer_start": starts},
    }


def _expect(value, kind, path, field, description):
    if not isinstance(value, kind):
        raise InputError(f"expected {description}", path=path, field=field)
    return value


def read_squad_sets(*, train: Sequence[str], dev: Sequence[str] = (), eval: Sequence[str] = (),
                    hold_out: Sequence[str] = (),
                    misaligned: str = "error", policy: str = "refuse", download: bool = False, say=log.info):
    """The SQuAD sets of one fine-tuning run, read and guarded as every task's are (finetuning/sets.py): training
    answers that do not align handled by `misaligned`, the other sets keeping theirs, the leakage `policy` applied."""
    from ..finetuning.sets import read_labelled_sets
    from .leakage import find_leakage

    def read(source: str, policy_for_bad_answers: str) -> SquadFile:
        return read_squad(source, misaligned=policy_for_bad_answers, download=download)

    return read_labelled_sets(read, find_leakage, train=train, dev=dev, eval=eval, hold_out=hold_out,
                              train_policy=misaligned, policy=policy, say=say)
