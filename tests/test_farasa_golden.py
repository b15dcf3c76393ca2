"""The Farasa port's segmentation, word by word, against tests/golden/farasa_segmentation.tsv.

The golden is read back out of the AraBERT v2 goldens (tests/golden/make_farasa_golden.py): the words of the 403 edge
cases with the segmentation that the reference `arabert` package marked. Those goldens were made with the port
answering the reference's Farasa call, since no Farasa jar was at hand (Java was; the jar is a download from QCRI):
so this pins the port to its recorded segmentation, naming the words that change, rather than checking it against
the jar. Regenerated with `make_farasa_golden.py --jar`, the same tests check the port against the jar.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

GOLDEN_DIR = Path(__file__).parent / "golden"
_spec = importlib.util.spec_from_file_location("make_farasa_golden", GOLDEN_DIR / "make_farasa_golden.py")
make_golden = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_golden)


@pytest.fixture(scope="module")
def golden() -> tuple[str, dict[str, str]]:
    lines = make_golden.GOLDEN.read_text(encoding="utf-8").split("\n")
    assert lines[0].startswith("# source: ")
    source = lines[0].removeprefix("# source: ")
    return source, dict(line.split("\t") for line in lines[2:] if line)


def test_the_golden_covers_the_edge_cases_segmented_words(golden):
    _, words = golden
    assert len(words) >= 300
    assert sum("+" in s for s in words.values()) >= 100  # most of the rest are punctuation, digits and Latin
    assert words["وسيكتبونها"] == "و+س+يكتب+ون+ها" and words["العربية"] == "ال+عربي+ة"


def test_the_golden_is_what_the_arabert_v2_goldens_say(golden):
    """Marked the AraBERT way, the golden's segmentations give the reference's v2 output of each edge case they come
    from, and reading them back again gives the committed file."""
    from arabert_pipeline.preprocess.segment import PLACEHOLDER_TOKENS, mark_tokens

    source, words = golden
    if source != make_golden.SOURCE_GOLDENS:
        pytest.skip(f"the golden was made from {source}, not from the AraBERT v2 goldens")
    cases = make_golden.read_cases()
    assert make_golden.from_goldens(cases)[0] == words
    checked = 0
    for case in cases:
        line = make_golden.segmenter_words(case["input"])
        if make_golden.read_back(line, case["v2"]) is None:
            continue  # brackets, which Farasa splits off and the marking drops
        tokens = [t for w in line for t in PLACEHOLDER_TOKENS.get(w) or words[w].split(" ")]
        assert " ".join(mark_tokens(tokens)) == case["v2"], case["input"]
        checked += 1
    assert checked >= 0.9 * len(cases)


@pytest.mark.slow
def test_the_port_segments_every_golden_word_as_recorded(golden):
    from arabert_pipeline.preprocess.segment import FarasaPySegmenter

    source, words = golden
    ours = FarasaPySegmenter().segment_words(list(words))
    wrong = {w: (" ".join(tokens), words[w]) for w, tokens in zip(words, ours, strict=True)
             if " ".join(tokens) != words[w]}
    assert not wrong, f"{len(wrong)} of {len(words)} words differ from the golden ({source}), (port, golden): {wrong}"
