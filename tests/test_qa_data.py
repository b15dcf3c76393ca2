"""QA data: SQuAD JSON validation, the dataset registry, misaligned answers, train/eval leakage."""
from __future__ import annotations

import json
import logging

import pytest

from arabert_pipeline.errors import ConfigError, DataNotFoundError, InputError
from arabert_pipeline.qa.data import REGISTRY, SPLITS, load_squad, read_squad, read_unanswerable
from arabert_pipeline.qa.leakage import find_leakage, normalize

ARCD_MISALIGNED = {"411858985910", "512657045685", "736438426218", "281472164170", "964512591997", "811471729708"}


def squad_file(tmp_path, qas, context="كان أحمد شوقي شاعرا مصريا.", name="mini.json"):
    path = tmp_path / name
    data = {"version": "1.1", "data": [{"title": "t", "paragraphs": [{"context": context, "qas": qas}]}]}
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return path


def qa(qid="q1", question="من كان شاعرا؟", text="أحمد شوقي", start=4):
    return {"id": qid, "question": question, "answers": [{"text": text, "answer_start": start}]}


def test_local_file_loads_as_dataset(tmp_path):
    dataset = load_squad(squad_file(tmp_path, [qa(), qa("q2", "ما جنسيته؟", "مصريا", 20)]))
    assert dataset.column_names == ["id", "title", "context", "question", "answers"]
    assert dataset[1]["answers"] == {"text": ["مصريا"], "answer_start": [20]}
    assert dataset[0]["context"][4:13] == "أحمد شوقي"


def test_invalid_json_names_file_and_line(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('{"data": [\n{"title": "x",\n', encoding="utf-8")
    with pytest.raises(InputError, match=r"broken\.json: line \d+: invalid JSON"):
        read_squad(path)


@pytest.mark.parametrize(
    "question, message",
    [
        ({"id": "q7", "answers": [{"text": "أحمد", "answer_start": 4}]}, "question q7: missing or empty 'question'"),
        ({"id": "q7", "question": "من؟"}, "question q7: missing or empty 'answers'"),
        ({"id": "q7", "question": "من؟", "answers": [{"text": "أحمد"}]}, "question q7: answers.0..answer_start"),
        ({"id": "q7", "question": "من؟", "answers": [{"text": "أحمد", "answer_start": 9}]},
         "question q7: answers.0..answer_start 9 does not match"),
        ({"question": "من؟", "answers": []}, r"data\[0\]\.paragraphs\[0\]\.qas\[0\]\.id: missing"),
    ],
)
def test_bad_questions_name_file_and_id(tmp_path, question, message):
    with pytest.raises(InputError, match=f"mini.json: {message}"):
        read_squad(squad_file(tmp_path, [question]))


def test_duplicate_ids_are_an_error(tmp_path):
    with pytest.raises(InputError, match="question q1: duplicate"):
        read_squad(squad_file(tmp_path, [qa(), qa()]))


def test_misaligned_policies_count_and_report(tmp_path):
    path = squad_file(tmp_path, [qa(), qa("bad", text="أحمد شوقي", start=0)])
    skipped = read_squad(path, misaligned="skip")
    assert [e["id"] for e in skipped.examples] == ["q1"]
    assert [m["id"] for m in skipped.misaligned] == ["bad"]
    assert "skipped 1 misaligned answer(s) (question ids: bad)" in skipped.describe_misaligned()
    kept = read_squad(path, misaligned="keep")
    assert [e["id"] for e in kept.examples] == ["q1", "bad"] and len(kept.misaligned) == 1
    with pytest.raises(ConfigError):
        read_squad(path, misaligned="ignore")


def test_arcd_has_six_misaligned_answers(full_data):
    with pytest.raises(InputError, match=r"arcd\.json: question 411858985910: .*does not match"):
        read_squad("arcd")
    skipped = read_squad("arcd", misaligned="skip")
    assert {m["id"] for m in skipped.misaligned} == ARCD_MISALIGNED
    assert len(skipped.examples) == 1395 - 6
    assert len(read_squad("arcd", misaligned="keep").examples) == 1395


def test_registry_resolves_the_shared_sets(full_data):
    counts = {name: len(read_squad(name, misaligned="keep").examples) for name, entry in REGISTRY.items()
              if name != "arabic-squad" and not entry.unanswerable}
    assert counts == {"arcd": 1395, "arcd-train": 693, "arcd-test": 702, "xquad-ar": 1190,
                      "tydiqa-goldp-ar-dev": 921, "mlqa-ar-dev": 517, "aqad": 11491}


def test_dev_split_takes_whole_articles_and_is_fixed(full_data):
    dev, rest = (read_squad(name, misaligned="keep").examples for name in SPLITS)
    assert (len(dev), len(rest)) == (135, 558)
    dev_titles, rest_titles = {e["title"] for e in dev}, {e["title"] for e in rest}
    assert len(dev_titles) == 15 and not dev_titles & rest_titles
    assert {e["id"] for e in dev} | {e["id"] for e in rest} == {e["id"] for e in read_squad("arcd-train",
                                                                                           misaligned="keep").examples}
    # Drawn from the sorted titles with a fixed seed, so every machine gets the same dev articles.
    assert {"سويسرا", "موناليزا", "كأس العالم 2018"} <= dev_titles


def test_opt_in_set_says_what_its_user_must_know(full_data, caplog):
    # Listening on the module's own logger: an earlier test's in-process CLI run may have stopped the package's logger
    # from propagating to the root logger, where caplog listens by default.
    logger = logging.getLogger("arabert_pipeline.qa.data")
    logger.addHandler(caplog.handler)
    try:
        with caplog.at_level("WARNING", logger=logger.name):
            read_squad("aqad", misaligned="keep")
    finally:
        logger.removeHandler(caplog.handler)
    assert "no licence stated" in caplog.text and "noisy" in caplog.text


def test_unanswerable_questions_are_read_apart_and_checked(tmp_path):
    """SQuAD 2.0: only the questions marked is_impossible, with empty answers; the others left out."""
    impossible = {"id": "n1", "question": "من كان رساما؟", "answers": [], "is_impossible": True}
    path = squad_file(tmp_path, [qa(), impossible, {**impossible, "id": "n2", "question": "متى ولد الرسام؟"}])
    found = read_unanswerable(path)
    assert [e["id"] for e in found] == ["n1", "n2"]
    assert found[0]["answers"] == {"text": [], "answer_start": []} and found[0]["context"].startswith("كان أحمد")
    with pytest.raises(InputError, match="marked is_impossible but has answers") as error:
        read_unanswerable(squad_file(tmp_path, [{**qa("n3"), "is_impossible": True}], name="both.json"))
    assert "question n3" in str(error.value) and "both.json" in str(error.value)
    with pytest.raises(InputError, match="no unanswerable question"):
        read_unanswerable(squad_file(tmp_path, [qa()], name="answerable.json"))
    with pytest.raises(InputError, match="true or false"):
        read_unanswerable(squad_file(tmp_path, [{**impossible, "is_impossible": "yes"}], name="odd.json"))
    with pytest.raises(InputError, match="duplicate"):
        read_unanswerable(squad_file(tmp_path, [impossible, impossible], name="twice.json"))
    # A registered set of negatives is not a SQuAD v1.1 set to score or train on, and says what it is for.
    assert REGISTRY["aqad-unanswerable"].unanswerable
    with pytest.raises(ConfigError, match="--no-answer-data"):
        read_squad("aqad-unanswerable")


def test_aqad_unanswerable_reads_whole(full_data):
    found = read_unanswerable("aqad-unanswerable")
    assert len(found) == 6418 and all(e["id"].startswith("aqad-") and e["question"] for e in found)


def test_missing_registered_set_says_where_to_put_it(tmp_path, monkeypatch):
    monkeypatch.setenv("ARABERT_PIPELINE_DATA", str(tmp_path))
    with pytest.raises(DataNotFoundError) as error:
        read_squad("arabic-squad")
    assert str(tmp_path / "qa" / "Arabic-SQuAD.json") in str(error.value)
    assert "husseinmozannar/SOQAL" in str(error.value)


def test_unknown_name_and_missing_path(tmp_path):
    with pytest.raises(ConfigError, match="arcd-test"):
        read_squad("arcd-validation")
    with pytest.raises(DataNotFoundError):
        read_squad(tmp_path / "nothing.json")


# Leakage --------------------------------------------------------------------------------------------------------

def example(qid, context, question, answer):
    return {"id": qid, "context": context, "question": question, "answers": {"text": [answer], "answer_start": [0]}}


CONTEXT = ("ولد نجيب محفوظ في القاهرة عام 1911 وحصل على جائزة نوبل في الأدب عام 1988 وكتب أكثر من ثلاثين رواية "
           "منها الثلاثية واللص والكلاب وأولاد حارتنا وترجمت أعماله إلى لغات كثيرة")


def test_near_duplicate_context_is_a_leak_and_unrelated_is_clean():
    train = [example("t1", CONTEXT, "متى ولد نجيب محفوظ؟", "1911")]
    edited = CONTEXT.replace("كثيرة", "عديدة").replace("ولد", "وُلِد")  # diacritics + one word changed
    leaky = find_leakage([("train", train)], [("test", [example("e1", edited, "ما أشهر رواياته؟", "الثلاثية")])])
    assert leaky.counts() == {"train -> test": {"contexts": 1, "questions": 0, "eval_questions_affected": 1}}
    assert leaky.train_ids() == {("train", "t1")}
    other = "تقع مدينة الإسكندرية على ساحل البحر المتوسط وأسسها الإسكندر الأكبر وكانت عاصمة مصر لقرون طويلة"
    assert find_leakage([("train", train)], [("test", [example("e1", other, "من أسسها؟", "الإسكندر")])]).clean


def test_an_identical_context_does_not_hide_an_extension_of_it():
    """ARCD annotated some articles twice: a test paragraph can be in training verbatim and inside a longer one."""
    extended = CONTEXT + " وتوفي في القاهرة عام 2006 بعد حياة طويلة في الكتابة"
    train = [example("t1", CONTEXT, "متى ولد نجيب محفوظ؟", "1911"), example("t2", extended, "متى توفي؟", "2006")]
    report = find_leakage([("train", train)], [("test", [example("e1", CONTEXT, "ما أشهر رواياته؟", "الثلاثية")])])
    assert report.train_ids() == {("train", "t1"), ("train", "t2")}


def test_shared_question_leaks_only_with_the_same_answer():
    other = "تقع مدينة الإسكندرية على ساحل البحر المتوسط وأسسها الإسكندر الأكبر وكانت عاصمة مصر لقرون طويلة"
    train = [example("t1", CONTEXT, "متى ولد نجيب محفوظ؟", "في عام 1911")]
    same = find_leakage([("train", train)], [("test", [example("e1", other, "متى وُلد نجيب محفوظ", "1911")])])
    assert same.counts()["train -> test"]["questions"] == 1
    different = find_leakage([("train", train)], [("test", [example("e1", other, "متى ولد نجيب محفوظ؟", "1912")])])
    assert different.clean


def test_normalize_folds_arabic_variants():
    assert normalize("إِنَّ الـمدرسةَ، كبيرة!") == normalize("ان المدرسه كبيره")


def test_full_arcd_against_arcd_test_leaks_everything(full_data):
    arcd = read_squad("arcd", misaligned="keep").examples
    test = read_squad("arcd-test", misaligned="keep").examples
    counts = find_leakage([("arcd", arcd)], [("arcd-test", test)]).counts()["arcd -> arcd-test"]
    assert counts["eval_questions_affected"] == 702 and counts["questions"] == 702


def test_official_arcd_split_shares_fourteen_paragraphs(full_data):
    # The official 50/50 split is by article entry, but several Wikipedia articles were annotated twice: 5 test
    # paragraphs occur verbatim in arcd-train and 9 more are excerpts/extensions of training paragraphs.
    load = lambda name: (name, read_squad(name, misaligned="keep").examples)  # noqa: E731  a one-line local helper
    report = find_leakage([load("arcd-train"), load("xquad-ar"), load("mlqa-ar-dev")], [load("arcd-test")])
    expected = {"contexts": 14, "questions": 3, "eval_questions_affected": 42}
    assert report.counts() == {"arcd-train -> arcd-test": expected}
    assert all(leak.train_set == "arcd-train" for leak in report.leaks)
