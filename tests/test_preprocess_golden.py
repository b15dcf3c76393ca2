"""Byte parity with the reference `arabert.preprocess.ArabertPreprocessor`, pinned by golden files.

The goldens come from tests/golden/make_preprocess_golden.py, which runs the real `arabert` package (v02, and v2
with its Farasa call answered by the Farasa port) on data/edge_cases.txt, on ~3,000 lines of the shared corpus and
on every Unicode code point.
"""
from __future__ import annotations

import importlib.util
import json
import lzma
from collections import defaultdict
from pathlib import Path

import pytest

from arabert_pipeline import Preprocessor
from arabert_pipeline.preprocess.normalize import normalize

GOLDEN = Path(__file__).parent / "golden"
_spec = importlib.util.spec_from_file_location("make_preprocess_golden", GOLDEN / "make_preprocess_golden.py")
make_golden = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_golden)


def digest(text: str) -> str:
    return make_golden.digest(text)


@pytest.fixture(scope="module")
def v02():
    return Preprocessor("arabertv02")


@pytest.fixture(scope="module")
def v2():
    return Preprocessor("arabertv2")


@pytest.fixture(scope="module")
def edge_cases() -> list[dict]:
    with open(GOLDEN / "preprocess_edge_cases.jsonl", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def test_edge_case_file_is_covered(samples, edge_cases):
    lines = (samples / "edge_cases.txt").read_text(encoding="utf-8").split("\n")[:-1]
    inputs = [case["input"] for case in edge_cases]
    assert inputs[:len(lines)] == lines
    assert len(lines) >= 300


def test_edge_cases_v02(v02, edge_cases):
    wrong = [(c["input"], v02.preprocess(c["input"]), c["v02"]) for c in edge_cases
             if v02.preprocess(c["input"]) != c["v02"]]
    assert not wrong, f"{len(wrong)} of {len(edge_cases)} differ, e.g. (input, ours, reference) {wrong[:3]}"
    assert v02.preprocess_batch([c["input"] for c in edge_cases]) == [c["v02"] for c in edge_cases]


def test_edge_cases_unpreprocess(v02, v2, edge_cases):
    for case in edge_cases:
        assert v02.unpreprocess(case["v02"]) == case["unpre_v02"], case["input"]
        assert v2.unpreprocess(case["v2"]) == case["unpre_v2"], case["input"]


def test_edge_cases_v2(v2, edge_cases):
    ours = v2.preprocess_batch([c["input"] for c in edge_cases])
    wrong = [(c["input"], o, c["v2"]) for c, o in zip(edge_cases, ours, strict=True) if o != c["v2"]]
    assert not wrong, f"{len(wrong)} of {len(edge_cases)} differ, e.g. (input, ours, reference) {wrong[:3]}"


@pytest.mark.slow
def test_every_code_point_v02():
    expected = {}
    with open(GOLDEN / "preprocess_codepoints.tsv", encoding="utf-8") as f:
        next(f)
        for row in f:
            first, hashed = row.rstrip("\n").split("\t")
            expected[int(first, 16)] = hashed
    probes = make_golden.codepoint_lines()
    assert [first for first, _ in probes] == list(expected)
    wrong = [f"U+{first:04X}" for first, line in probes if digest(normalize(line)) != expected[first]]
    assert not wrong, f"the blocks of {make_golden.CODEPOINTS_PER_LINE} code points from {wrong[:10]} differ"


@pytest.mark.slow
def test_corpus_sample(full_data, v02, v2):
    rows = defaultdict(list)
    with open(GOLDEN / "preprocess_corpus.tsv", encoding="utf-8") as f:
        header = next(f).rstrip("\n").split("\t")
        for row in f:
            record = dict(zip(header, row.rstrip("\n").split("\t"), strict=True))
            rows[record["file"]].append(record)
    assert sum(map(len, rows.values())) >= 3000
    texts, records = [], []
    for name, file_rows in rows.items():
        with lzma.open(full_data / "corpus" / name, "rt", encoding="utf-8", newline="\n") as f:
            lines = f.read().split("\n")
        for record in file_rows:
            texts.append(lines[int(record["line"]) - 1])
            records.append(record)
    ours = v02.preprocess_batch(texts)
    wrong = [(r["file"], r["line"]) for r, o in zip(records, ours, strict=True) if digest(o) != r["v02"]]
    assert not wrong, f"v02 differs on {len(wrong)} of {len(texts)} lines, e.g. {wrong[:5]}"
    wrong = [(r["file"], r["line"]) for r, o in zip(records, ours, strict=True)
             if digest(v02.unpreprocess(o)) != r["unpre_v02"]]
    assert not wrong, f"unpreprocess differs on {len(wrong)} lines, e.g. {wrong[:5]}"
    segmented = [(r, t) for r, t in zip(records, texts, strict=True) if r["v2"] != "-"]
    assert len(segmented) >= 500
    ours_v2 = v2.preprocess_batch([t for _, t in segmented])
    wrong = [(r["file"], r["line"]) for (r, _), o in zip(segmented, ours_v2, strict=True) if digest(o) != r["v2"]]
    assert not wrong, f"v2 differs on {len(wrong)} of {len(segmented)} lines, e.g. {wrong[:5]}"
    wrong = [(r["file"], r["line"]) for (r, _), o in zip(segmented, ours_v2, strict=True)
             if digest(v2.unpreprocess(o)) != r["unpre_v2"]]
    assert not wrong, f"v2 unpreprocess differs on {len(wrong)} lines, e.g. {wrong[:5]}"
