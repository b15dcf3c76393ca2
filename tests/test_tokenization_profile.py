"""scripts/tokenization_profile.py (issue 29's explanation of differences between tokenizers): tokens per word,
questions fitting one window, gold answers exact in tokens, on a small SQuAD file with the shipped tokenizer."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "arabert_pipeline" / "models" / "arabert-mini"


def _squad(path: Path) -> None:
    short = "ولد الشاعر أحمد شوقي في القاهرة عام 1868"
    long = " ".join(["كانت المدينة عاصمة الدولة ومركزا للتجارة والعلم"] * 60) + " وتقع في مصر"
    paragraphs = [
        {"context": short, "qas": [{"id": "whole", "question": "أين ولد أحمد شوقي؟",
                                    "answers": [{"text": "القاهرة", "answer_start": short.index("القاهرة")}]}]},
        # Half a word: no token span of an unsegmented tokenizer maps back to exactly "اهرة".
        {"context": short, "qas": [{"id": "half", "question": "ما آخر المدينة؟",
                                    "answers": [{"text": "اهرة", "answer_start": short.index("اهرة")}]}]},
        # A clitic split off by the tokenizer ("▁و", "شوق", "ي"): exact in tokens, starting inside a word.
        {"context": "كتب حافظ وشوقي قصائد كثيرة", "qas": [{"id": "clitic", "question": "من كتب مع حافظ؟",
                                                        "answers": [{"text": "شوقي", "answer_start": 10}]}]},
        {"context": long, "qas": [{"id": "long", "question": "أين تقع المدينة؟",
                                   "answers": [{"text": "مصر", "answer_start": long.index("مصر")}]}]},
    ]
    path.write_text(json.dumps({"version": "1.1", "data": [{"title": "t", "paragraphs": paragraphs}]},
                               ensure_ascii=False), encoding="utf-8")


def test_the_profile_counts_windows_and_answers_exact_in_tokens(tmp_path):
    data = tmp_path / "qa.json"
    _squad(data)
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "tokenization_profile.py"), "--tokenizer",
                          f"shipped={SHIPPED}", "--data", str(data)], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    row = [line for line in out.stdout.splitlines() if "| shipped |" in line]
    assert len(row) == 1
    cells = [c.strip() for c in row[0].strip("|").split("|")]
    assert cells[0] == "qa.json (4 questions, 4 answers)" and cells[2] == "arabertv02"
    assert 1.0 <= float(cells[3]) < 3.0  # tokens per word
    assert float(cells[4]) == 75.0  # the long context needs a second window
    assert float(cells[5]) == 75.0  # "اهرة" is not exact in tokens
    assert float(cells[6]) == 25.0  # "شوقي" after its "و"


@pytest.mark.slow
def test_answers_the_preprocessing_loses_count_as_not_exact_and_bad_input_is_named(tmp_path):
    data = tmp_path / "qa.json"
    context = "قال الكاتب وَشوقي شاعر ولقبه Ἀλέξανδρος"
    paragraphs = [{"context": context, "qas": [
        {"id": "vocalized", "question": "من الشاعر؟",
         "answers": [{"text": "شوقي", "answer_start": context.index("شوقي")}]},
        # AraBERT preprocessing deletes Greek letters: nothing maps back to this answer.
        {"id": "greek", "question": "ما لقبه؟",
         "answers": [{"text": "Ἀλέξανδρος", "answer_start": context.index("Ἀ")}]}]}]
    data.write_text(json.dumps({"version": "1.1", "data": [{"title": "t", "paragraphs": paragraphs}]},
                               ensure_ascii=False), encoding="utf-8")
    out = tmp_path / "profile.md"
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "tokenization_profile.py"), "--tokenizer",
                           f"shipped={SHIPPED}", "--data", str(data), "-o", str(out)], capture_output=True, text=True,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr
    cells = [c.strip() for c in out.read_text(encoding="utf-8").splitlines()[-1].strip("|").split("|")]
    assert cells[0] == "qa.json (2 questions, 2 answers)"
    assert float(cells[5]) == 50.0  # the Greek answer is in the denominator, never exact
    assert float(cells[6]) == 50.0  # "شوقي" begins after a fatha: inside the word "وَشوقي"
    missing = subprocess.run([sys.executable, str(ROOT / "scripts" / "tokenization_profile.py"), "--tokenizer",
                              f"x={tmp_path / 'nowhere'}", "--data", str(data), "-o", str(tmp_path / "x.md")],
                             capture_output=True, text=True, cwd=ROOT)
    assert missing.returncode == 2 and "nowhere" in missing.stderr and "Traceback" not in missing.stderr
    assert not (tmp_path / "x.md").exists()
