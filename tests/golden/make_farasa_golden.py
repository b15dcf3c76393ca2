"""Regenerate tests/golden/farasa_segmentation.tsv, the word-level golden of tests/test_farasa_golden.py.

    python tests/golden/make_farasa_golden.py                  # from the AraBERT v2 goldens beside this script
    python tests/golden/make_farasa_golden.py --jar FarasaSegmenterJar.jar   # from QCRI's jar, where Java and it are

Every word that `Preprocessor("arabertv2")` hands its segmenter for the lines of preprocess_edge_cases.jsonl, with
its Farasa segmentation (`و+ال+كتاب`; several tokens space-separated).

By default the segmentations are read back out of that file's `v2` column, the reference `arabert` package's marked
output (`و+ ال+ كتاب`): each word takes the marked pieces whose letters spell it, and their bare segments joined by `+`
are its segmentation. make_preprocess_golden.py answered the reference's Farasa call with the Farasa port, so this
golden records what the port said then, seen through AraBERT's marking: it pins the port word by word, and is not the
jar's segmentation. No jar was at hand when it was made (Java was, the jar is a download from QCRI); with `--jar`, the
same words are segmented by the jar instead and the header says so, and the test then checks the port against the jar.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO))

EDGE_CASES = HERE / "preprocess_edge_cases.jsonl"
GOLDEN = HERE / "farasa_segmentation.tsv"
SOURCE_GOLDENS = "arabert-v2-goldens"
SOURCE_JAR = "jar"


def segmenter_words(text: str) -> list[str]:
    """The words `Preprocessor("arabertv2")` sends to its segmenter for one line."""
    from arabert_pipeline.preprocess.normalize import normalize
    from arabert_pipeline.preprocess.preprocessor import SEGMENT_MARKER

    normalized = normalize(text)
    return [w for w in normalized.split(" ") if w != SEGMENT_MARKER] if normalized else []


def read_back(words: list[str], marked: str) -> dict[str, str] | None:
    """{word: segmentation} from one line's words and its AraBERT-marked v2 text, or None where the pieces do not
    spell the words in order (a placeholder, a bracket Farasa split off)."""
    from arabert_pipeline.preprocess.segment import PLACEHOLDER_TOKENS, desegment_word

    pieces = marked.split(" ") if marked else []
    found, position = {}, 0
    for word in words:
        if word in PLACEHOLDER_TOKENS:  # never sent to a backend: written back whole
            if position < len(pieces) and pieces[position] == word:
                position += 1
                continue
            return None
        if "[" in word or "]" in word:  # Farasa splits brackets off as tokens of their own, which the marking drops
            return None
        segments = []
        while position < len(pieces):
            segments.append(pieces[position].strip("+"))
            position += 1
            if desegment_word("+".join(segments)) == word:
                break
        else:
            return None
        if desegment_word("+".join(segments)) != word or found.get(word, "+".join(segments)) != "+".join(segments):
            return None
        found[word] = "+".join(segments)
    return found if position == len(pieces) else None


def read_cases() -> list[dict]:
    with open(EDGE_CASES, encoding="utf-8") as f:  # by "\n" alone: some inputs hold U+2028 and other breaks
        return [json.loads(line) for line in f]


def from_goldens(cases: list[dict]) -> tuple[dict[str, str], int]:
    golden, skipped = {}, 0
    for case in cases:
        found = read_back(segmenter_words(case["input"]), case["v2"])
        if found is None or any(golden.get(w, s) != s for w, s in found.items()):
            skipped += 1
            continue
        golden.update(found)
    return golden, skipped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jar", help="QCRI's FarasaSegmenterJar.jar: segment the words with it instead")
    args = parser.parse_args()
    cases = read_cases()
    golden, skipped = from_goldens(cases)
    source = SOURCE_GOLDENS
    if args.jar:
        from arabert_pipeline.preprocess.segment import FarasaJarSegmenter

        words = sorted(golden)
        segmenter = FarasaJarSegmenter(args.jar)
        golden = {w: " ".join(t) for w, t in zip(words, segmenter.segment_words(words), strict=True)}
        segmenter.close()
        source = SOURCE_JAR
    with open(GOLDEN, "w", encoding="utf-8") as f:
        f.write(f"# source: {source}\n")
        f.write("# word\tFarasa segmentation (tests/golden/make_farasa_golden.py)\n")
        for word in sorted(golden):
            f.write(f"{word}\t{golden[word]}\n")
    print(f"{GOLDEN.name}: {len(golden)} words from {len(cases) - skipped} of {len(cases)} lines ({source})",
          file=sys.stderr)


if __name__ == "__main__":
    main()
