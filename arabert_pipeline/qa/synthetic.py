"""Typed synthetic QA from an unlabelled corpus (`arabert-pipeline make-synthetic-qa`): what ~1,800 labelled questions
cannot teach a reader — which *kind* of span answers متى, كم, من, أين or أي.

The recipe follows what mattered in the semi-supervised QA ablations:
- Dhingra, Pruthi & Rajagopal 2018 ("Simple and Effective Semi-Supervised Question Answering"): a cloze question made
  from one passage of a document (they used the introduction) and answered in *another* passage of the same
  document, so the reader must match meaning rather than copy the string around the blank.
- Lewis, Denoyer & Riedel 2019 ("Unsupervised Question Answering by Cloze Translation"): answers typed by a named-
  entity category, the blank replaced by the question word of that category and moved to the front, and the cloze cut
  to the clause around the answer rather than the whole sentence (shorter questions trained better readers).

Answers are typed spans found with the corpus's own statistics (no tagger is needed, none is shipped):
- date (متى): years (1500-2049) after عام / سنة / منذ ..., and day + month (+ year) in the Gregorian, Levantine and
  Hijri month names;
- number (كم): a number with its scale and unit (7 ملايين زائر, 330 مترا, 15%);
- person (من): a gazetteer of two- and three-word names read off the words after titles (الرئيس، الوزير، اللاعب
  ...), kept when seen at least `min_count` times and when their first word is rarely written with the article ال
  (a name: بشار, ديفيد; not a noun: مجلس, which is common as المجلس);
- place (أين): a gazetteer of the words after place nouns (مدينة، محافظة، العاصمة ...), asked only where the text puts
  the place after a locative preposition (في / إلى / من ...);
- organisation (أي + its head noun): a gazetteer of the phrases after organisation nouns (وزارة الصحة, جامعة الملك
  سعود).

Each question: the clause around one answer in its sentence, with the answer (and the preposition or trigger word
that belongs to it) taken out, the question word in front, discourse openers (و, كما, وقد ...) dropped, ending in ؟.
Its context: another paragraph of the same document (never the question's own) in which the answer occurs as whole
words, extended by the following paragraphs, then the preceding ones, to at least `min_context_words` words (a
question with no such context is not written); a question whose clause the context holds nearly word for word, or
whose answer occurs in the question, is not written.

The leakage guard applies at document level: a document any of whose paragraphs the guard (qa/leakage.py) finds in a
--hold-out set, or one of whose questions it finds there with the same answer, gives no question at all.
Output: SQuAD v1.1 JSON, one article per document, each question with an extra `answer_type` field; written
atomically under a lock; per-input parts under OUTPUT.parts/ let `--resume` skip finished inputs.
"""
from __future__ import annotations

import collections
import dataclasses
import difflib
import hashlib
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..artifacts.metadata import sidecar_preprocessing
from ..artifacts.reads import check_input_file
from ..artifacts.writes import atomic_write
from ..cliargs import check_seed
from ..errors import ConfigError, InputError
from ..outputs import OutputLock, claim_output_file
from .cloze import (
    _ARABIC_WORD,
    _ORG_NOUNS,
    _PLACE_NOUNS,
    _PUNCT,
    _SENTENCE_END,
    _STOP,
    _TITLES,
    ANSWER_TYPES,
    Gazetteers,
    _clean,
    _find_whole_words,
    _name_after,
    _normalized,
    _strip_clitic,
    find_candidates,
    make_question,
)

if TYPE_CHECKING:
    import numpy as np

FORMAT = "arabert-pipeline synthetic-qa 2"  # bump when the generator's output changes for the same input


@dataclasses.dataclass
class SyntheticConfig:
    """What `make-synthetic-qa` reads and how much it writes; every field is a flag of the verb."""

    corpus: list[str]  # corpus files (.txt / .txt.gz / .txt.xz: a paragraph a line, a blank line between documents)
    output: str  # the SQuAD JSON to write
    hold_out: list[str]  # QA sets (files or registry names) whose documents must not be used: the dev and test sets
    types: tuple[str, ...] = ANSWER_TYPES  # answer types to write
    max_per_document: int = 4  # questions per document at most (drawn with `seed` among its candidates)
    min_count: int = 3  # times a name, place or organisation must recur after its title / noun to enter a gazetteer
    clause_words: int = 8  # words kept on each side of the answer in the question (Lewis et al.'s sub-clause)
    min_context_words: int = 60  # a shorter context takes the neighbouring paragraphs too; none that long: no question
    max_context_words: int = 300  # and never grows past this
    limit: int | None = None  # at most this many questions in all (a seeded sample of documents), for learning curves
    seed: int = 0
    overwrite: bool = False
    resume: bool = False
    progress: bool = True

    def validate(self) -> None:
        if not self.corpus:
            raise ConfigError("give at least one corpus file")
        unknown = sorted(set(self.types) - set(ANSWER_TYPES))
        if unknown or not self.types:
            raise ConfigError(f"--types {' '.join(unknown) or '(none)'}: choose among {', '.join(ANSWER_TYPES)}")
        for name in ("max_per_document", "min_count", "clause_words", "min_context_words", "max_context_words"):
            if getattr(self, name) < 1:
                raise ConfigError(f"--{name.replace('_', '-')} {getattr(self, name)}: must be at least 1")
        if self.limit is not None and self.limit < 1:
            raise ConfigError(f"--limit {self.limit}: must be at least 1")
        if self.min_context_words > self.max_context_words:
            raise ConfigError("--min-context-words must not exceed --max-context-words")
        if self.overwrite and self.resume:
            raise ConfigError("--overwrite starts again and --resume continues: give one of them")
        check_seed(self.seed)


@dataclasses.dataclass
class SyntheticReport:
    questions: int
    documents: int  # documents that gave at least one question
    per_type: dict[str, int]
    held_out_documents: int  # dropped by the leakage guard
    gazetteer: dict[str, int]  # entries per gazetteer


# --------------------------------------------------------------------------------------------- corpus reading


def read_documents(path: str, progress: bool = True) -> Iterator[list[str]]:
    """The documents of one corpus file, each a list of its paragraphs (lines)."""
    from tqdm.auto import tqdm

    from ..pretrain.data import read_lines

    document: list[str] = []
    with tqdm(total=Path(path).stat().st_size, unit="B", unit_scale=True, desc=Path(path).name,
              disable=not progress) as bar:
        for line in read_lines([path], bar):
            if line is None:
                if document:
                    yield document
                document = []
            else:
                document.append(" ".join(line.split()))
    if document:
        yield document


def collect_gazetteers(paths: list[str], min_count: int, progress: bool = True) -> Gazetteers:
    """One pass over the corpus counting what follows titles, place nouns and organisation nouns."""
    after_title: collections.Counter = collections.Counter()
    after_place: collections.Counter = collections.Counter()
    after_org: collections.Counter = collections.Counter()
    word_counts: collections.Counter = collections.Counter()
    title_documents: dict[tuple[str, ...], set[int]] = collections.defaultdict(set)  # template text repeats names
    documents = 0
    for path in paths:
        for document in read_documents(path, progress):
            documents += 1
            for paragraph in document:
                words = paragraph.split()
                word_counts.update(_clean(w) for w in words)
                for i, raw in enumerate(words[:-1]):
                    word = _strip_clitic(_clean(raw))
                    if raw[-1:] in _PUNCT:
                        continue
                    if word in _TITLES:
                        j = i + 1  # skip the title's adjectives and complements: الرئيس الأمريكي / وزير الخارجية
                        while j < len(words) and j <= i + 3 and _clean(words[j]).startswith("ال") \
                                and words[j][-1:] not in _PUNCT:
                            j += 1
                        name = _name_after(words, j)
                        if len(name) >= 2 and not name[0].startswith("ال"):
                            for n in (2, 3):
                                if len(name) >= n:
                                    after_title[tuple(name[:n])] += 1
                                    title_documents[tuple(name[:n])].add(documents)
                    elif word in _PLACE_NOUNS:
                        place = _clean(words[i + 1])
                        if place and _ARABIC_WORD.match(place) and place not in _STOP:
                            after_place[(place,)] += 1
                    elif word in _ORG_NOUNS:
                        rest = _name_after(words, i + 1)
                        for n in range(1, len(rest) + 1):
                            phrase = (word, *rest[:n])
                            after_org[phrase] += 1

    def name_like(word: str) -> bool:
        # A noun is common with the article (المجلس); a given name almost never is (البشار). A word that is a common
        # word behind a one-letter clitic (لكرة = ل + كرة) is no name either.
        if word.startswith(("لل", "بال", "وال", "فال", "كال")):
            return False  # a preposition or conjunction glued to an article: مركز الملك سلمان للإغاثة
        if word.startswith("ال"):
            return True  # a family name (الفيصل) is judged by the words before it
        clitic = word[:1] in "وفبلك" and word_counts[word[1:]] > 2 * word_counts[word]
        return word_counts[word] >= 2 and word_counts["ال" + word] * 10 < word_counts[word] and not clitic

    person = {name for name, count in after_title.items()
              if count >= min_count and len(title_documents[name]) >= min_count and all(map(name_like, name))}
    # Keep the longer of two nested names only when it recurs on its own (محمد بن سلمان, not a name + one more word).
    person = {name for name in person
              if len(name) == 2 or after_title[name] * 2 >= after_title[name[:2]]}
    # A place is named after a place noun in a good share of its mentions (مدينة جدة); a common word that happens to
    # follow one (منطقة دول ...) is mostly written without it.
    places = {p for p, count in after_place.items()
              if count >= min_count and count >= 0.05 * word_counts[p[0]] and not p[0].endswith(("ية", "يين", "يون"))}
    # Every recurring phrase: the longest one that a sentence holds is the answer (جامعة الملك عبدالعزيز, not
    # جامعة الملك).
    organisation = {o for o, count in after_org.items() if count >= min_count and len(o) >= 2}
    return Gazetteers(person, places, organisation)


# --------------------------------------------------------------------------------------------- a document's questions


def document_examples(document: list[str], doc_id: str, gazetteers: Gazetteers, config: SyntheticConfig,
                      rng: np.random.Generator) -> list[dict[str, Any]]:
    """The questions of one document (at most config.max_per_document), answered in its other paragraphs."""
    candidates = []
    for p_index, paragraph in enumerate(document):
        for sentence in _SENTENCE_END.split(paragraph):
            for candidate in find_candidates(sentence, gazetteers, config.types):
                candidates.append((p_index, sentence, candidate))
    if not candidates:
        return []
    examples: list[dict[str, Any]] = []
    asked: set[str] = set()
    for index in rng.permutation(len(candidates)):
        if len(examples) >= config.max_per_document:
            break
        p_index, sentence, candidate = candidates[index]
        key = _normalized(candidate.answer)
        if not key or key in asked:
            continue
        question = make_question(sentence, candidate, config.clause_words)
        if question is None or key in _normalized(question):
            continue
        context, start = _context_for(document, p_index, candidate.answer, config, rng)
        if context is None:
            continue
        if _copied(question.split(" ", 1)[1], context):  # the question's clause found in the context teaches nothing
            continue
        asked.add(key)
        examples.append({
            "id": f"{doc_id}-{len(examples)}", "title": document[0][:200], "context": context, "question": question,
            "answers": {"text": [candidate.answer], "answer_start": [start]}, "answer_type": candidate.type,
        })
    return examples


def _copied(clause: str, context: str, share: float = 0.8) -> bool:
    """Whether the context holds the question's clause nearly word for word: runs of two or more of its words, in its
    order, covering `share` of it. The answer taken out of the middle of the clause leaves the context's copy split
    in two around it, which a substring test would miss."""
    asked, read = _normalized(clause).split(), _normalized(context).split()
    if not asked:
        return False
    matcher = difflib.SequenceMatcher(None, asked, read, autojunk=False)
    copied = sum(block.size for block in matcher.get_matching_blocks() if block.size >= 2)
    return copied >= share * len(asked) or (len(asked) == 1 and asked[0] in read)


def _context_for(document: list[str], source: int, answer: str, config: SyntheticConfig,
                 rng: np.random.Generator) -> tuple[str | None, int]:
    holders = [i for i, paragraph in enumerate(document) if i != source and _find_whole_words(paragraph, answer) >= 0]
    for first in (holders[i] for i in rng.permutation(len(holders))):
        paragraphs = [document[first]]
        words = len(document[first].split())
        # The following paragraphs first, then the preceding ones, never the question's own.
        for step, others in ((1, range(first + 1, len(document))), (-1, range(first - 1, -1, -1))):
            for i in others:
                if words >= config.min_context_words:
                    break
                if i == source:
                    continue
                extra = len(document[i].split())
                if words + extra > config.max_context_words:
                    break
                paragraphs = [*paragraphs, document[i]] if step == 1 else [document[i], *paragraphs]
                words += extra
        # A headline or a byline alone is no passage to read: another paragraph holding the answer, or none.
        if config.min_context_words <= words <= config.max_context_words:
            context = " ".join(paragraphs)
            return context, _find_whole_words(context, answer)
    return None, -1


# --------------------------------------------------------------------------------------------- the verb


def _fingerprint(path: str, config: SyntheticConfig, gazetteer_digest: str, hold_out_digest: str) -> dict[str, Any]:
    stat = Path(path).stat()
    fields = {k: v for k, v in dataclasses.asdict(config).items()
              if k not in ("corpus", "output", "overwrite", "resume", "progress", "limit", "hold_out")}
    fingerprint = {"format": FORMAT, "input": str(Path(path).resolve()), "size": stat.st_size,
                   "mtime_ns": stat.st_mtime_ns, "settings": fields, "gazetteer": gazetteer_digest,
                   "hold_out": hold_out_digest}
    return json.loads(json.dumps(fingerprint))  # as it reads back from a part (tuples become lists)


def _digest(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:16]


def _leaking_documents(examples_by_doc: dict[str, list[dict]], documents: dict[str, list[str]],
                       hold_out: list[tuple[str, list[dict]]]) -> set[str]:
    """Documents with a paragraph or a question that the leakage guard finds in a hold-out set."""
    from .leakage import find_leakage

    probes: list[dict[str, Any]] = []
    for doc_id, examples in examples_by_doc.items():
        probes += examples
        probes += [{"id": f"{doc_id}-p{i}", "context": p, "question": "", "answers": {"text": []}}
                   for i, p in enumerate(documents[doc_id])]
    report = find_leakage(hold_out, [("synthetic", probes)])
    return {eval_id.rsplit("-", 1)[0] for leak in report.leaks for eval_id in leak.eval_ids}


def make_synthetic_qa(config: SyntheticConfig) -> SyntheticReport:
    """Write config.output (SQuAD JSON); per-input parts in OUTPUT.parts/ make the run resumable."""
    import numpy as np

    from .data import read_squad, resolve

    config.validate()
    for path in config.corpus:
        check_input_file(path, "corpus file")
        preprocessing = sidecar_preprocessing(path)
        if preprocessing not in (None, "none"):
            raise InputError(f"preprocessed with {preprocessing!r} (its sidecar says so): the questions are made from "
                             "raw text, as the QA sets hold it; give the corpus before `arabert-pipeline preprocess`",
                             path=path)
    resolved = [Path(p).resolve() for p in config.corpus]
    repeated = next((p for p, r in zip(config.corpus, resolved, strict=True) if resolved.count(r) > 1), None)
    if repeated is not None:
        raise ConfigError(f"corpus file {repeated} given more than once: its documents would be asked twice")
    output = Path(config.output)
    hold_out_paths = [resolve(s) for s in config.hold_out]
    claim_output_file(output, verb="make-synthetic-qa", inputs=[*config.corpus, *hold_out_paths],
                      overwrite=config.overwrite or config.resume)
    parts = output.with_name(output.name + ".parts")
    with OutputLock(output, "make-synthetic-qa"):
        if output.exists() and not _written_here(output):
            raise ConfigError(f"{output} was not written by make-synthetic-qa: it is never replaced; choose another "
                              "file")
        if parts.exists() and not (parts / "owner.json").exists():
            raise ConfigError(f"{parts} exists and was not written by make-synthetic-qa: move it away")
        if config.resume and output.exists() and not parts.exists():
            raise ConfigError(f"{output} is finished: nothing to resume (--overwrite makes it again)")
        started = parts.exists() and any(p.name != "owner.json" for p in parts.iterdir())
        if started and not config.resume:
            if not config.overwrite:
                raise ConfigError(f"{parts} holds an unfinished run: pass --resume to continue it or --overwrite to "
                                  "start again")
            shutil.rmtree(parts)
        # Every input is read (the hold-out sets, then the corpus by the gazetteer pass) before OUT.parts/ is made: a
        # bad one leaves nothing behind that a later run would take for an unfinished one.
        hold_out_files = [read_squad(source, misaligned="keep") for source in config.hold_out]
        hold_out = [(source, f.examples) for source, f in zip(config.hold_out, hold_out_files, strict=True)]
        # By content: a part made against another --hold-out file left out other documents, whatever the file's name.
        hold_out_digest = _digest([f.content_digest() for f in hold_out_files])

        gazetteer_file = parts / "gazetteer.json"
        inputs_digest = _digest([[str(Path(p).resolve()), Path(p).stat().st_size, Path(p).stat().st_mtime_ns]
                                 for p in config.corpus] + [config.min_count, FORMAT])
        stored = json.loads(gazetteer_file.read_text(encoding="utf-8")) if gazetteer_file.exists() else {}
        collected = stored.get("inputs") != inputs_digest
        if collected:
            gazetteers = collect_gazetteers(config.corpus, config.min_count, config.progress)
        else:
            gazetteers = Gazetteers.from_json(stored["gazetteers"])
        parts.mkdir(exist_ok=True)
        (parts / "owner.json").write_text(json.dumps({"verb": "make-synthetic-qa"}), encoding="utf-8")
        if collected:
            with atomic_write(gazetteer_file) as f:
                json.dump({"inputs": inputs_digest, "gazetteers": gazetteers.to_json()}, f, ensure_ascii=False)
        gazetteer_digest = _digest(gazetteers.to_json())

        articles: list[dict[str, Any]] = []
        held_out_documents = 0
        for index, path in enumerate(config.corpus):
            part = parts / f"{index:03d}.json"
            fingerprint = _fingerprint(path, config, gazetteer_digest, hold_out_digest)
            if part.exists():
                done = json.loads(part.read_text(encoding="utf-8"))
                if done.get("fingerprint") == fingerprint:
                    articles += done["articles"]
                    held_out_documents += done["held_out_documents"]
                    continue
            rng = np.random.default_rng([config.seed, index])  # per input: a resumed run draws the same
            examples_by_doc: dict[str, list[dict]] = {}
            documents: dict[str, list[str]] = {}
            for d, document in enumerate(read_documents(path, config.progress)):
                doc_id = f"syn-{index:03d}-{d:06d}"
                examples = document_examples(document, doc_id, gazetteers, config, rng)
                if examples:
                    examples_by_doc[doc_id], documents[doc_id] = examples, document
            leaking = _leaking_documents(examples_by_doc, documents, hold_out) if hold_out else set()
            part_articles = [_article(examples) for doc_id, examples in examples_by_doc.items()
                             if doc_id not in leaking]
            with atomic_write(part) as f:
                json.dump({"fingerprint": fingerprint, "articles": part_articles,
                           "held_out_documents": len(leaking)}, f, ensure_ascii=False)
            articles += part_articles
            held_out_documents += len(leaking)

        if config.limit is not None:
            articles = _sample(articles, config.limit, config.seed)
        if not articles:
            shutil.rmtree(parts)  # nothing to resume: the same inputs would give nothing again
            why = (f"the leakage guard left out {held_out_documents} document(s) and the others gave none"
                   if held_out_documents else "it needs Arabic news-like documents: paragraphs a line, a blank line "
                                              "between documents")
            raise InputError(f"no question could be made from the corpus ({why})", path=", ".join(config.corpus))
        per_type = collections.Counter(qa["answer_type"] for a in articles for p in a["paragraphs"] for qa in p["qas"])
        with atomic_write(output) as f:
            json.dump({"version": FORMAT, "data": articles}, f, ensure_ascii=False)
        shutil.rmtree(parts)
    return SyntheticReport(questions=sum(per_type.values()), documents=len(articles),
                           per_type={t: per_type.get(t, 0) for t in config.types},
                           held_out_documents=held_out_documents, gazetteer=gazetteers.sizes())


def _written_here(output: Path) -> bool:
    """Whether `output` is a file this verb wrote: json.dump puts the version first."""
    with open(output, "rb") as f:
        head = f.read(200)
    return head.startswith(b'{"version": "arabert-pipeline synthetic-qa ')


def _article(examples: list[dict[str, Any]]) -> dict[str, Any]:
    paragraphs: dict[str, list[dict]] = {}
    for e in examples:
        paragraphs.setdefault(e["context"], []).append({
            "id": e["id"], "question": e["question"], "answer_type": e["answer_type"],
            "answers": [{"text": e["answers"]["text"][0], "answer_start": e["answers"]["answer_start"][0]}],
        })
    return {"title": examples[0]["title"],
            "paragraphs": [{"context": context, "qas": qas} for context, qas in paragraphs.items()]}


def _sample(articles: list[dict[str, Any]], limit: int, seed: int) -> list[dict[str, Any]]:
    """Whole documents drawn with `seed` until `limit` questions."""
    import numpy as np

    order = np.random.default_rng([seed, 1]).permutation(len(articles))
    kept, total = [], 0
    for i in order:
        n = sum(len(p["qas"]) for p in articles[i]["paragraphs"])
        if total + n > limit:
            continue
        kept.append(articles[i])
        total += n
        if total == limit:
            break
    return kept
