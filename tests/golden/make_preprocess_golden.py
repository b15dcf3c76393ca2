"""Regenerate the golden files of tests/test_preprocess_golden.py from the reference `arabert` package.

    python tests/golden/make_preprocess_golden.py [--reference-python ~/.cache/arabert_pipeline/arabert-venv/bin/python]

Run it with this project's environment (for the Farasa port); it runs `ArabertPreprocessor` in a subprocess of the
reference Python, an environment outside the repository with `pip install arabert` (arabert is never a dependency).
The reference's Farasa call is replaced by the Farasa port's output for each word, so the v2 goldens pin the
AraBERT marking of the port's segmentation (farasapy would download the Java jar, which is impossible offline).

Writes, beside this script:
- preprocess_edge_cases.jsonl: for each line of data/edge_cases.txt plus a few control-character lines, the input and
  the reference's v02 output, v2 output, and unpreprocess of both, in full;
- preprocess_corpus.tsv: ~3,000 lines sampled from the shared corpus as (file, line number, sha256 prefixes of the same
  outputs); corpus text is not copied, the test reads it from the shared data. v2 columns for a subset only
  (segmenting is slow); `-` elsewhere;
- preprocess_codepoints.tsv: every Unicode code point except surrogates, 256 per line, each inside a probe that
  exercises the spacing, whitelist, squeeze and digit/letter rules; the sha256 prefix of the reference's v02 output per
  line.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO))

CORPUS_LINES_PER_FILE = 200
V2_LINES_PER_FILE = 40
CODEPOINTS_PER_LINE = 256
SEED = 20240601
# Not in data/edge_cases.txt because text tools treat them as line breaks.
CONTROL_LINES = ["كلمة\u2028كلمة", "كلمة\u2029كلمة", "كلمة\x0bكلمة", "كلمة\x0cكلمة", "كلمة\x1cكلمة", "كلمة\x85كلمة",
                 "\x00\x01\x7f", "سطر\rسطر", "سطر\nسطر", "سطر\r\nسطر"]

REFERENCE_SCRIPT = r"""
import json, logging, sys
logging.disable(logging.WARNING)
from arabert.preprocess import ArabertPreprocessor
job = json.load(open(sys.argv[1], encoding="utf-8"))
segmentation = job["segmentation"]

class PortOutput:
    # Stands in for farasapy's FarasaSegmenter: the Farasa port's output, word by word.
    def segment(self, text):
        return " ".join(segmentation[w] for w in text.split())

v02 = ArabertPreprocessor("bert-base-arabertv02")
v2 = ArabertPreprocessor("bert-base-arabertv2", apply_farasa_segmentation=False)
v2.apply_farasa_segmentation = True
v2.farasa_segmenter = PortOutput()
out = {"v02": [], "v2": [], "unpre_v02": [], "unpre_v2": [], "probes": []}
for line, segment in zip(job["lines"], job["segment"]):
    a = v02.preprocess(line)
    out["v02"].append(a)
    out["unpre_v02"].append(v02.unpreprocess(a))
    b = v2.preprocess(line) if segment else None
    out["v2"].append(b)
    out["unpre_v2"].append(v2.unpreprocess(b) if segment else None)
out["probes"] = [v02.preprocess(p) for p in job["probes"]]
json.dump(out, open(sys.argv[2], "w", encoding="utf-8"), ensure_ascii=False)
"""


def digest(text: str | None) -> str:
    return "-" if text is None else hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def probe(ch: str) -> str:
    """One code point in the contexts the rules look at: next to letters and digits, tripled, alone."""
    return f"ك{ch}1{ch}{ch}{ch}a{ch}ب {ch} 2{ch}"


def codepoint_lines() -> list[tuple[int, str]]:
    chars = [chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    return [(ord(chars[i]), " ".join(probe(ch) for ch in chars[i:i + CODEPOINTS_PER_LINE]))
            for i in range(0, len(chars), CODEPOINTS_PER_LINE)]


def sample_corpus(corpus: Path) -> list[tuple[str, int, str, bool]]:
    """(file name, 1-based line number, text, segment too?) for a seeded sample of every corpus file."""
    rng = random.Random(SEED)
    sample = []
    for path in sorted(corpus.glob("*.txt.xz")):
        with lzma.open(path, "rt", encoding="utf-8", newline="\n") as f:
            lines = f.read().split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        picked = sorted(rng.sample(range(len(lines)), CORPUS_LINES_PER_FILE))
        v2 = set(rng.sample(picked, V2_LINES_PER_FILE))
        sample.extend((path.name, i + 1, lines[i], i in v2) for i in picked)
    return sample


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    venv = Path.home() / ".cache" / "arabert_pipeline" / "arabert-venv"
    parser.add_argument("--reference-python", default=os.environ.get("ARABERT_REFERENCE_PYTHON",
                                                                     str(venv / "bin" / "python")))
    parser.add_argument("--data", default=os.environ.get("ARABERT_PIPELINE_DATA", REPO.parent / "shared" / "data"))
    args = parser.parse_args()

    from arabert_pipeline.preprocess.normalize import normalize
    from arabert_pipeline.preprocess.segment import FarasaPySegmenter

    edge = (REPO / "data" / "edge_cases.txt").read_text(encoding="utf-8").split("\n")[:-1] + CONTROL_LINES
    corpus = sample_corpus(Path(args.data) / "corpus")
    lines = edge + [text for _, _, text, _ in corpus]
    segment = [True] * len(edge) + [v2 for *_, v2 in corpus]
    words = sorted({w for line, s in zip(lines, segment, strict=True) if s for w in normalize(line).split()} - {"+"})
    print(f"{len(lines)} lines, segmenting {len(words)} distinct words with the Farasa port", file=sys.stderr)
    segmenter = FarasaPySegmenter()
    segmentation = {w: " ".join(t) for w, t in zip(words, segmenter.segment_words(words), strict=True)} if words else {}
    segmentation["+"] = ""  # the port's output for a lone `+` (FarasaPySegmenter refuses to return it)
    probes = codepoint_lines()

    with tempfile.TemporaryDirectory() as tmp:
        job, result = Path(tmp, "job.json"), Path(tmp, "out.json")
        job.write_text(json.dumps({"lines": lines, "segment": segment, "segmentation": segmentation,
                                   "probes": [p for _, p in probes]}), encoding="utf-8")
        subprocess.run([args.reference_python, "-c", REFERENCE_SCRIPT, str(job), str(result)], check=True)
        out = json.loads(result.read_text(encoding="utf-8"))

    keys = ["v02", "v2", "unpre_v02", "unpre_v2"]
    with open(HERE / "preprocess_edge_cases.jsonl", "w", encoding="utf-8") as f:
        for i, line in enumerate(edge):
            f.write(json.dumps({"input": line, **{k: out[k][i] for k in keys}}, ensure_ascii=False) + "\n")
    with open(HERE / "preprocess_corpus.tsv", "w", encoding="utf-8") as f:
        f.write("file\tline\t" + "\t".join(keys) + "\n")
        for j, (name, number, _, _) in enumerate(corpus):
            i = len(edge) + j
            f.write(f"{name}\t{number}\t" + "\t".join(digest(out[k][i]) for k in keys) + "\n")
    with open(HERE / "preprocess_codepoints.tsv", "w", encoding="utf-8") as f:
        f.write("first_codepoint\tv02\n")
        for (first, _), expected in zip(probes, out["probes"], strict=True):
            f.write(f"{first:x}\t{digest(expected)}\n")
    print(f"wrote {len(edge)} edge cases, {len(corpus)} corpus lines, {len(probes)} code point lines",
          file=sys.stderr)


if __name__ == "__main__":
    main()
