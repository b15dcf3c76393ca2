"""`arabert-pipeline export-contexts` (qa/contexts.py): the paragraphs of QA training sets as a pretraining corpus,
each once, articles apart, never a held-out set's paragraph, and a corpus that preprocess and pretrain read."""
from __future__ import annotations

import json

import pytest

from arabert_pipeline.cli import main

SHARED = ("تأسست مدينة بغداد في القرن الثامن الميلادي على يد الخليفة أبي جعفر المنصور وكانت عاصمة الدولة العباسية "
          "ومركزا للعلم والثقافة في العالم الإسلامي لقرون طويلة")


def _write(path, articles: dict[str, list[str]], prefix: str) -> None:
    data = []
    for title, contexts in articles.items():
        paragraphs = []
        for i, context in enumerate(contexts):
            answer = context.split()[0]
            # Two questions on the first paragraph: it must still be written once.
            paragraphs.append({"context": context, "qas": [
                {"id": f"{prefix}-{title}-{i}-{k}", "question": f"ما السؤال رقم {k}؟",
                 "answers": [{"text": answer, "answer_start": 0}]} for k in range(2 if i == 0 else 1)]})
        data.append({"title": title, "paragraphs": paragraphs})
    path.write_text(json.dumps({"version": "1.1", "data": data}, ensure_ascii=False), encoding="utf-8")


@pytest.fixture
def sets(tmp_path):
    train, test = tmp_path / "train.json", tmp_path / "test.json"
    _write(train, {"بغداد": ["القاهرة مدينة كبيرة\nعلى ضفاف النيل", SHARED],
                   "دمشق": ["دمشق من أقدم المدن المأهولة في العالم"]}, "train")
    # An excerpt of the shared paragraph, as ARCD's official split has: the guard's context rule must catch it.
    _write(test, {"بغداد": [" ".join(SHARED.split()[:14])]}, "test")
    return train, test


def test_each_paragraph_once_articles_apart_held_out_paragraphs_left_out(sets, tmp_path, capsys):
    train, test = sets
    out = tmp_path / "contexts.txt"
    assert main(["export-contexts", "--train", str(train), "--hold-out", str(test), "-o", str(out)]) == 0
    assert out.read_text(encoding="utf-8") == ("القاهرة مدينة كبيرة على ضفاف النيل\n\n"
                                               "دمشق من أقدم المدن المأهولة في العالم\n")
    assert "2 paragraphs of 2 articles, 13 words; 1 paragraphs left out" in capsys.readouterr().out
    assert main(["export-contexts", "--train", str(train), "-o", str(tmp_path / "all.txt")]) == 0
    assert SHARED in (tmp_path / "all.txt").read_text(encoding="utf-8").splitlines()


def test_the_corpus_is_one_preprocess_reads(sets, tmp_path):
    train, _ = sets
    out = tmp_path / "contexts.txt"
    assert main(["export-contexts", "--train", str(train), "-o", str(out)]) == 0
    processed = tmp_path / "contexts.arabertv02.txt"
    assert main(["preprocess", str(out), "-o", str(processed), "--preprocessing", "arabertv02", "--no-progress"]) == 0
    lines = processed.read_text(encoding="utf-8").split("\n")
    assert lines.count("") == 2 and len(lines) == 5  # 3 paragraphs, one blank line between articles, a final newline


def test_an_existing_output_is_kept_unless_overwrite(sets, tmp_path, capsys):
    train, _ = sets
    out = tmp_path / "mine.txt"
    out.write_text("a user's notes\n", encoding="utf-8")
    assert main(["export-contexts", "--train", str(train), "-o", str(out)]) != 0
    assert "exists: pass --overwrite" in capsys.readouterr().err
    assert out.read_text(encoding="utf-8") == "a user's notes\n"
    assert main(["export-contexts", "--train", str(train), "-o", str(out), "--overwrite"]) == 0
    assert out.read_text(encoding="utf-8").startswith("القاهرة")


def test_a_training_set_that_is_all_held_out_and_a_bad_file_are_named(sets, tmp_path, capsys):
    train, _ = sets
    assert main(["export-contexts", "--train", str(train), "--hold-out", str(train),
                 "-o", str(tmp_path / "x.txt")]) != 0
    assert "no paragraph is left" in capsys.readouterr().err
    broken = tmp_path / "broken.json"
    broken.write_text('{"version": "1.1", "data": [', encoding="utf-8")
    assert main(["export-contexts", "--train", str(broken), "-o", str(tmp_path / "y.txt")]) != 0
    assert "broken.json" in capsys.readouterr().err
    assert not (tmp_path / "x.txt").exists() and not (tmp_path / "y.txt").exists()


def test_ids_are_per_file_copies_are_written_once_and_a_new_title_starts_an_article(tmp_path):
    first, second, test = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "test.json"
    # Both files number their questions from the same ids; only a.json's paragraph is held out.
    _write(first, {"بغداد": [SHARED]}, "same")
    _write(second, {"بغداد": ["دمشق من أقدم المدن المأهولة في العالم",
                              "دِمَشْق  من أقدم المدن المأهولة في العالم"],  # the same paragraph, vocalized
                    "القاهرة": ["القاهرة مدينة كبيرة على ضفاف النيل"]}, "same")
    _write(test, {"x": [SHARED]}, "test")
    out = tmp_path / "contexts.txt"
    assert main(["export-contexts", "--train", str(first), str(second), "--hold-out", str(test), "-o", str(out)]) == 0
    assert out.read_text(encoding="utf-8") == ("دمشق من أقدم المدن المأهولة في العالم\n\n"
                                               "القاهرة مدينة كبيرة على ضفاف النيل\n")


def test_a_paragraph_inside_a_longer_training_paragraph_takes_both_out(sets, tmp_path):
    train, test = sets
    _write(train, {"بغداد": [SHARED, SHARED + " وفيها بيت الحكمة الذي جمع العلماء من كل مكان"],
                   "دمشق": ["دمشق من أقدم المدن المأهولة في العالم"]}, "train")
    _write(test, {"بغداد": [SHARED]}, "test")
    out = tmp_path / "contexts.txt"
    assert main(["export-contexts", "--train", str(train), "--hold-out", str(test), "-o", str(out)]) == 0
    assert out.read_text(encoding="utf-8") == "دمشق من أقدم المدن المأهولة في العالم\n"


def test_a_training_set_given_by_name_is_never_the_output(sets, tmp_path, monkeypatch, capsys):
    train, _ = sets
    (tmp_path / "root" / "qa").mkdir(parents=True)
    registered = tmp_path / "root" / "qa" / "xquad.ar.json"
    registered.write_bytes(train.read_bytes())
    monkeypatch.setenv("ARABERT_PIPELINE_DATA", str(tmp_path / "root"))
    assert main(["export-contexts", "--train", "xquad-ar", "-o", str(registered), "--overwrite"]) != 0
    assert "input" in capsys.readouterr().err
    assert registered.read_bytes() == train.read_bytes()
