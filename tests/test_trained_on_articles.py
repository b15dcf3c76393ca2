"""tune-decoding and soup refuse a dev set sharing an article with the model's training data (issue 52, class 2), also
when one is a whole file and the other a registered split of it (arcd-train against arcd-dev / arcd-train-rest)."""
from __future__ import annotations

import json

import pytest

from arabert_pipeline.qa.data import DIGEST_KEY, read_squad, sets_trained_on


@pytest.fixture
def arcd_train(tmp_path, monkeypatch):
    """A 10-article stand-in for arcd-train under a data root of its own (arcd-dev: 2 articles, rest: 8)."""
    articles = [{"title": f"مقالة {a}", "paragraphs": [{"context": f"نص المقالة رقم {a} هنا", "qas": [
        {"id": f"q{a}", "question": "ما الرقم؟",
         "answers": [{"text": "رقم", "answer_start": f"نص المقالة رقم {a} هنا".index("رقم")}]}]}]}
        for a in range(10)]
    (tmp_path / "qa").mkdir()
    path = tmp_path / "qa" / "arcd-train.json"
    path.write_text(json.dumps({"data": articles}, ensure_ascii=False), encoding="utf-8")
    monkeypatch.setenv("ARABERT_PIPELINE_DATA", str(tmp_path))
    return path


def recorded(source) -> list[dict]:
    f = read_squad(str(source))
    return [{"name": f.name, "path": str(f.path), DIGEST_KEY: f.content_digest()}]


def test_a_whole_file_and_its_splits_overlap_by_article(arcd_train, tmp_path):
    dev, rest, whole = (read_squad(s) for s in ("arcd-dev", "arcd-train-rest", "arcd-train"))
    assert len(dev.examples) == 2 and len(rest.examples) == 8
    copy = tmp_path / "copy.json"
    copy.write_bytes(arcd_train.read_bytes())
    by_path = read_squad(str(copy))
    # trained on the whole file: every split of it, under any name, holds trained articles
    assert sets_trained_on(recorded("arcd-train"), [dev, rest, by_path]) == sorted([dev.name, rest.name, by_path.name])
    # trained on arcd-train-rest: the whole file holds its articles, arcd-dev none
    assert sets_trained_on(recorded("arcd-train-rest"), [whole, by_path]) == sorted([whole.name, by_path.name])
    assert sets_trained_on(recorded("arcd-train-rest"), [dev]) == []
    assert sets_trained_on(recorded("arcd-dev"), [rest]) == []
    assert sets_trained_on(recorded("arcd-dev"), [whole]) == ["arcd-train"]


def test_an_entry_without_a_digest_is_compared_by_its_file_or_name(arcd_train):
    dev = read_squad("arcd-dev")
    # a model dir written before digests: the recorded path names the whole file, here
    assert sets_trained_on([{"name": "arcd-train", "path": str(arcd_train)}], [dev]) == ["arcd-dev"]
    # its file not here: compared by name only
    assert sets_trained_on([{"name": "arcd-dev", "path": "/nowhere/x.json"}], [dev]) == ["arcd-dev"]
    assert sets_trained_on([{"name": "arcd-train", "path": "/nowhere/x.json"}], [dev]) == []
