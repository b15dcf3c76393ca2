"""Write tests/data/shared/: small slices of the shared data, laid out like it, so a fresh clone runs the suite.

    python tests/data/make_shared_slices.py [SHARED_DATA]   # default ../shared/data; rewrites tests/data/shared/

Only sets whose licence allows redistribution are sliced (ARCD: MIT; XQuAD: CC BY-SA 4.0; MLQA: CC BY-SA 3.0;
TyDi QA: Apache-2.0; the ANT corpus shard: Apache-2.0; mBERT's vocab: Apache-2.0; AraBERT v2's vocab: AUB's
licence, which allows copies with attribution). AQAD states no licence and SaudiNewsNet is non-commercial: neither
is copied. The vocabularies keep their first lines (special and unused tokens) and every token the full vocabulary
produces on the sliced QA texts, so tokenizing those texts gives the same pieces as with the full file. Deterministic:
rerunning on the same inputs rewrites the same bytes. `README.md` beside the slices records sources and sha256.
"""
from __future__ import annotations

import hashlib
import json
import lzma
import sys
from pathlib import Path

TARGET = Path(__file__).resolve().parent / "shared"

QA_SLICES = {  # file under qa/ → (articles kept from the start, licence)
    "arcd-train.json": (20, "MIT"),
    "arcd-test.json": (6, "MIT"),
    "xquad.ar.json": (2, "CC BY-SA 4.0"),
    "mlqa-dev-context-ar-question-ar.json": (20, "CC BY-SA 3.0"),
    "tydiqa-goldp-dev-arabic.json": (40, "Apache-2.0"),
}
CORPUS_SHARDS = {"ant-jawharafm-000.txt.xz": 300, "ant-multisource-000.txt.xz": 100, "ant-multisource-006.txt.xz": 100}
VOCABS = {  # file under vocab/ → (leading lines kept, tokenizer preprocessing, licence)
    "mbert-cased-vocab.txt": (1000, "none", "Apache-2.0 (Google BERT)"),
    "arabertv2-farasa-segmented-vocab.txt": (200, "arabertv2", "AraBERT licence (AUB; copies with attribution)"),
}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def slice_qa(source: Path, target: Path, articles: int) -> dict:
    data = json.loads(source.read_text(encoding="utf-8"))
    data["data"] = data["data"][:articles]
    target.write_text(json.dumps(data, ensure_ascii=False, indent=0) + "\n", encoding="utf-8")
    questions = sum(len(p["qas"]) for a in data["data"] for p in a["paragraphs"])
    return {"articles": articles, "questions": questions}


def slice_corpus(source: Path, target: Path, documents: int) -> None:
    lines, seen = [], 0
    with lzma.open(source, "rt", encoding="utf-8", newline="\n") as f:
        for line in f:
            lines.append(line)
            seen += not line.strip()
            if seen == documents:
                break
    with lzma.open(target, "wt", encoding="utf-8", newline="\n", preset=9) as f:
        f.write("".join(lines))


def qa_texts(root: Path) -> list[str]:
    texts = []
    for name in QA_SLICES:
        for article in json.loads((root / "qa" / name).read_text(encoding="utf-8"))["data"]:
            for paragraph in article["paragraphs"]:
                texts.append(paragraph["context"])
                texts.extend(qa["question"] for qa in paragraph["qas"])
    return texts


def slice_vocab(source: Path, target: Path, leading: int, preprocessing: str, texts: list[str]) -> dict:
    """The leading lines plus every token the full vocabulary uses on `texts`, in the file's order and line ends."""
    from tokenizers import BertWordPieceTokenizer

    from arabert_pipeline.preprocess import Preprocessor

    raw = source.read_bytes()
    newline = b"\r\n" if b"\r\n" in raw else b"\n"
    tokens = raw.decode("utf-8").splitlines()
    lf = target.with_suffix(".full-lf.tmp")
    lf.write_text("\n".join(tokens) + "\n", encoding="utf-8")
    try:
        tokenizer = BertWordPieceTokenizer(str(lf), lowercase=False, strip_accents=False)
    finally:
        lf.unlink()
    if preprocessing != "none":
        preprocessor = Preprocessor(preprocessing)
        texts = [preprocessor.preprocess(text) for text in texts]
    used = {piece for encoding in tokenizer.encode_batch(texts, add_special_tokens=False) for piece in encoding.tokens}
    kept = [t for i, t in enumerate(tokens) if i < leading or t in used]
    target.write_bytes(newline.join(t.encode("utf-8") for t in kept) + (newline if raw.endswith(newline) else b""))
    if preprocessing == "arabertv2":  # the LF copy the shared data also has
        target.with_name(target.name.replace(".txt", ".lf.txt")).write_text("\n".join(kept) + "\n", encoding="utf-8")
    return {"tokens": len(kept), "of": len(tokens)}


def main(argv: list[str]) -> int:
    shared = Path(argv[0]) if argv else Path(__file__).resolve().parents[3] / "shared" / "data"
    rows = []
    for folder in ("qa", "corpus", "vocab"):
        (TARGET / folder).mkdir(parents=True, exist_ok=True)
    for name, (articles, licence) in QA_SLICES.items():
        kept = slice_qa(shared / "qa" / name, TARGET / "qa" / name, articles)
        rows.append((f"qa/{name}", f"first {kept['articles']} articles ({kept['questions']} questions)", licence,
                     sha256(shared / "qa" / name)))
    # ARCD's all-questions file is its train and test files together; the slice is the two slices together.
    train, test = (json.loads((TARGET / "qa" / n).read_text(encoding="utf-8")) for n in ("arcd-train.json",
                                                                                          "arcd-test.json"))
    train["data"] += test["data"]
    (TARGET / "qa" / "arcd.json").write_text(json.dumps(train, ensure_ascii=False, indent=0) + "\n", encoding="utf-8")
    rows.append(("qa/arcd.json", "the arcd-train and arcd-test slices together", "MIT",
                 sha256(shared / "qa" / "arcd.json")))
    for shard, documents in CORPUS_SHARDS.items():
        slice_corpus(shared / "corpus" / shard, TARGET / "corpus" / shard, documents)
        rows.append((f"corpus/{shard}", f"first {documents} documents", "Apache-2.0 (ANT corpus)",
                     sha256(shared / "corpus" / shard)))
    texts = qa_texts(TARGET)
    for name, (leading, preprocessing, licence) in VOCABS.items():
        kept = slice_vocab(shared / "vocab" / name, TARGET / "vocab" / name, leading, preprocessing, texts)
        rows.append((f"vocab/{name}", f"first {leading} lines + the {kept['tokens'] - leading} other tokens used on "
                     f"the QA slices ({kept['tokens']} of {kept['of']})", licence, sha256(shared / "vocab" / name)))
    table = "\n".join(f"| `{path}` | {what} | {licence} | `{digest[:16]}` |" for path, what, licence, digest in rows)
    (TARGET / "README.md").write_text(
        "# Slices of the shared data for a fresh clone\n\n"
        "Written by `tests/data/make_shared_slices.py` from the files described in `shared/data/*/README.md` and "
        "`SOURCES.md` (sources, commits, licences). The tests use this folder when `../shared/data` is absent; "
        "tests that check properties of the full sets (question counts, the official split's leak) skip here.\n\n"
        "| file | what | licence | sha256 of the full source file (first 16) |\n|---|---|---|---|\n"
        f"{table}\n\nNot copied: AQAD (no licence stated), SaudiNewsNet (CC BY-NC-SA).\n", encoding="utf-8")
    print(f"wrote {TARGET}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
