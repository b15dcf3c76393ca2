"""Learnable toys for the classification and NER tests: data a tiny model can only get right by learning (the
sentiment word decides a text's label; a name's tag depends on the word before it), written as the files users give,
and the tiny encoders they are fine-tuned from."""
from __future__ import annotations

import contextlib
import json
import random
from pathlib import Path

POSITIVE, NEGATIVE = ["جميل", "رائع", "ممتاز", "حلو"], ["سيء", "قبيح", "رديء", "مزعج"]
FILLER = ["الفيلم", "كان", "هذا", "اليوم", "جدا", "المطعم", "في", "الخدمة"]
# The same names are people after a title and places after "مدينة": the tag needs the context.
NAMES = ["حمدان", "سلمان", "نجران", "عدنان", "ريان", "مروان"]
VERBS, OTHER = ["زار", "سكن", "أحب", "ترك"], ["أمس", "اليوم", "مع", "كثيرا"]


def texts(n: int, seed: int, exclude: set[str] = frozenset()) -> list[dict]:
    """`n` distinct labelled texts, none of them in `exclude` (so that a dev set shares no text with training)."""
    rng = random.Random(seed)
    rows, seen = [], set(exclude)
    while len(rows) < n:
        label = rng.choice(["POS", "NEG"])
        words = rng.sample(FILLER, 4) + [rng.choice(POSITIVE if label == "POS" else NEGATIVE)]
        rng.shuffle(words)
        text = " ".join(words)
        if text not in seen:
            seen.add(text)
            rows.append({"id": len(rows), "text": text, "label": label})
    return rows


def sentences(n: int, seed: int, exclude: set[str] = frozenset(), clitics: bool = False
              ) -> list[tuple[list[str], list[str]]]:
    """`n` distinct tagged sentences (none joined in `exclude`); `clitics`: the conjunction و (Farasa's `و+` segment)
    on some names and verbs, so that a tagger of segmented text learns them too."""
    rng = random.Random(seed)
    out, seen = [], set(exclude)

    def word(w: str) -> str:
        return "و" + w if clitics and rng.random() < 0.3 else w

    while len(out) < n:
        words, tags = ["السيد", word(rng.choice(NAMES))], ["O", "B-PERS"]
        if rng.random() < 0.5:
            words += ["بن", rng.choice(NAMES)]
            tags += ["I-PERS", "I-PERS"]
        words += [word(rng.choice(VERBS)), "مدينة", word(rng.choice(NAMES)), rng.choice(OTHER)]
        tags += ["O", "O", "B-LOC", "O"]
        if " ".join(words) not in seen:
            seen.add(" ".join(words))
            out.append((words, tags))
    return out


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def write_conll(path: Path, rows) -> Path:
    path.write_text("".join("".join(f"{w}\t{t}\n" for w, t in zip(words, tags, strict=True)) + "\n"
                            for words, tags in rows), encoding="utf-8")
    return path


def tiny_encoder(directory: Path, corpus, preprocessing: str = "none") -> Path:
    """A random BERT L2/H64 MLM with a WordPiece vocab of the toy words (`corpus`, as `preprocessing` writes them),
    recording `preprocessing`."""
    from arabert_pipeline.artifacts.metadata import write_metadata
    from conftest import build_tiny_bert

    build_tiny_bert(directory, corpus, "BertForMaskedLM", vocab_size=200, max_positions=64)
    write_metadata(directory, preprocessing=preprocessing)
    return directory


@contextlib.contextmanager
def one_thread():
    """Training toys with torch's default threads on a busy 2-core machine spends its time spinning: one thread."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
