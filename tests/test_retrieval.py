"""Retrieval's in-memory core: passages with exact offsets (property tests too), the Arabic analysis, `Index.build`
without a path, `search`, `search_many` and `rank_passages`, and the errors of bad documents and queries."""
from __future__ import annotations

import json

import pytest

from arabert_pipeline import Index
from arabert_pipeline.errors import ConfigError, InputError
from arabert_pipeline.retrieval import Passage, rank_passages, split_passages
from arabert_pipeline.retrieval.analysis import QUESTION_WORDS, analysis_names, get_analysis

NILE = "يعد نهر النيل أطول أنهار العالم، إذ يبلغ طوله نحو 6650 كيلومترا. وينبع من بحيرة فيكتوريا."
CAIRO = "تأسست جامعة القاهرة عام 1908 باسم الجامعة المصرية، وهي ثاني أقدم جامعة في مصر."
FALCON = "الصقر طائر جارح يعيش في الصحراء ويصطاد الطيور الصغيرة والقوارض."


def spans(text: str, max_chars: int) -> list[str]:
    return [text[p.start:p.end] for p in split_passages(text, max_chars)]


# ------------------------------------------------------------------------------------------------------- passages

def test_paragraphs_are_packed_whole_up_to_the_limit():
    text = "  أ ب ج\n\nد ه و\nز ح ط  \n" + "ي" * 30
    assert spans(text, 25) == ["أ ب ج\n\nد ه و\nز ح ط", "ي" * 30]  # a lone word over the limit stays whole
    assert spans(text, 100) == [text.strip()]
    assert split_passages(text, 25, document=4)[0] == Passage(4, 2, 20)


def test_a_long_paragraph_is_split_at_sentence_ends_then_between_words():
    sentences = ["هذه جملة أولى.", "أين الثانية؟", "ثالثة؛", "ورابعة!", "and a Latin one?"]
    text = " ".join(sentences)
    assert spans(text, 30) == ["هذه جملة أولى. أين الثانية؟", "ثالثة؛ ورابعة!", "and a Latin one?"]
    assert spans("رقم 3.5 في جملة واحدة طويلة جدا", 20) == ["رقم 3.5 في جملة", "واحدة طويلة جدا"]
    # The pieces of a long paragraph are never packed with the next paragraph.
    assert spans(text + "\nقصيرة", 30)[-2:] == ["and a Latin one?", "قصيرة"]


def test_whitespace_only_text_has_no_passages_and_the_limit_is_checked():
    assert split_passages(" \n\t ") == []
    with pytest.raises(ConfigError, match="max_chars 5"):
        split_passages("نص", 5)
    with pytest.raises(ConfigError):
        split_passages(None)


hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given  # noqa: E402  after the importorskip above
from hypothesis import strategies as st  # noqa: E402  after the importorskip above

_PIECES = st.sampled_from(["كلمة", "نص", "a", "bc", "3.5", " ", "  ", "\n", "\r\n", "\n\n", ".", "؟", "؛", "!", "?",
                           "»", "\u2028", "\t", "طويلةجدا" * 4])


@given(st.lists(_PIECES, max_size=80).map("".join), st.integers(20, 60))
def test_passage_offsets_cover_the_text_exactly(text, max_chars):
    passages = split_passages(text, max_chars)
    assert passages == split_passages(text, max_chars)  # deterministic
    covered = []
    previous_end = 0
    for passage in passages:
        piece = text[passage.start:passage.end]
        assert piece and piece == piece.strip()
        assert passage.start >= previous_end
        assert text[previous_end:passage.start].strip() == ""  # nothing but whitespace between passages
        # never inside a word: whitespace (or the text's edge) on both sides
        assert passage.start == 0 or text[passage.start - 1].isspace()
        assert passage.end == len(text) or text[passage.end].isspace()
        assert len(piece) <= max_chars or len(piece.split()) == 1
        if len(piece.splitlines()) > 1:  # paragraphs are packed whole: a passage across lines holds whole lines
            assert (text[:passage.start] + "x").splitlines()[-1][:-1].strip() == ""
            assert ("x" + text[passage.end:]).splitlines()[0][1:].strip() == ""
        covered.append(piece)
        previous_end = passage.end
    assert text[previous_end:].strip() == ""
    assert "".join("".join(covered).split()) == "".join(text.split())


# ------------------------------------------------------------------------------------------------------- analysis

def test_light_analysis_strips_the_article_and_proclitics_only():
    terms = get_analysis("arabertv02-light").terms("وبالكتاب للمدرسة والقاهرة كتاب فيلم وقت بيت أولى مستشفى")
    assert terms == ["كتاب", "مدرسه", "قاهره", "كتاب", "فيلم", "وقت", "بيت", "اولي", "مستشفي"]
    assert get_analysis("arabertv02").terms("الكتاب، Book!") == ["الكتاب", "book"]


def test_light10_also_strips_one_suffix_where_two_letters_remain():
    terms = get_analysis("arabertv02-light10").terms("المعلمون الكتابات لاعبين المدينة كتابها كان بين فيه")
    assert terms == ["معلم", "كتاب", "لاعب", "مدين", "كتاب", "كان", "بين", "في"]


def test_question_words_and_bigrams_are_levers():
    question = "متى تأسست جامعة القاهرة؟"
    assert get_analysis("arabertv02-light").terms(question)[0] == "متي"
    assert get_analysis("arabertv02-light+qwords").terms(question) == ["تاسست", "جامعه", "قاهره"]
    assert get_analysis("arabertv02-light+qwords+bigrams").terms(question)[3:] == ["تاسست_جامعه", "جامعه_قاهره"]
    assert {"متي", "اين", "كيف", "لماذا"} <= QUESTION_WORDS


def test_analysis_names_are_checked():
    assert "arabertv02-light+qwords+bigrams" in analysis_names()
    for name in ("bm25", "arabertv02-light+bigrams+qwords", "arabertv02-light+qwords+qwords", 3):
        with pytest.raises(ConfigError, match="analysis"):
            get_analysis(name)


@pytest.mark.slow
def test_farasa_analysis_keeps_stems_and_drops_clitics():
    terms = get_analysis("arabertv2-light").terms("وسيكتبونها بالقلم")
    assert terms == ["يكتب", "قلم"]


# ------------------------------------------------------------------------------------------------------- the index

@pytest.fixture(scope="module")
def index():
    return Index.build([NILE, CAIRO, FALCON], ids=["nile", "cairo", 7], titles=["النيل", None, "صقر"])


def test_search_names_the_document_and_the_exact_span(index):
    hits = index.search("متى تأسست جامعة القاهرة؟", k=3)
    best = hits[0]
    assert (best.document, best.title, best.passage) == ("cairo", None, Passage(1, 0, len(CAIRO)))
    assert best.text == CAIRO == index.document_text(1)[best.passage.start:best.passage.end]
    # Adjacent pairs (hits[1:] is one shorter): the scores never rise.
    assert best.score > 0 and all(a.score >= b.score for a, b in zip(hits, hits[1:], strict=False))
    assert index.search("كم يبلغ طول نهر النيل", k=1)[0].document == "nile"
    assert (len(index), index.documents, index.analysis) == (3, 3, "arabertv02-light10+qwords")
    assert index.document_id(2) == "7" and index.document_title(0) == "النيل"


def test_only_passages_sharing_a_term_are_hits(index):
    assert [h.document for h in index.search("الصقر", k=10)] == ["7"]
    assert index.search("؟؟ !", k=10) == [] and index.search("", k=3) == []
    assert index.search_many(["الصقر", "جامعة القاهرة"], k=2) == [index.search("الصقر", 2),
                                                                   index.search("جامعة القاهرة", 2)]


def test_ids_default_to_positions_and_ties_go_to_the_earlier_passage():
    index = Index.build(["قطة سوداء", "قطة سوداء", "كلب"])
    assert [(h.document, h.passage.document) for h in index.search("قطة")] == [("0", 0), ("1", 1)]
    assert index.document_title(0) is None


@pytest.mark.parametrize("texts, ids, titles, message", [
    (["نص", 3], None, None, r"texts\[1\]: a document is a string, not int"),
    (["نص", " \n"], ["a", "b"], None, r"texts\[1\]: empty document \(id 'b'\)"),
    (["نص", "نص آخر"], ["a", "a"], None, r"ids\[1\]: duplicate id 'a' \(also ids\[0\]\)"),
    (["نص", "نص آخر"], ["1", 1], None, r"ids\[1\]: duplicate id '1'"),
    (["نص", "نص آخر"], ["a"], None, "ids: 1 given for 2 documents"),
    (["نص"], None, ["a", "b"], "titles: 2 given for 1 documents"),
    (["نص"], None, [3], r"titles\[0\]: a title is a string or None"),
    (["نص"], [None], None, r"ids\[0\]: an id is a non-empty string or an integer"),
    ("نص", None, None, "texts: must be a list of documents"),
    ([], None, None, "texts: no documents to index"),
])
def test_bad_documents_are_refused_naming_them(texts, ids, titles, message):
    with pytest.raises(InputError, match=message):
        Index.build(texts, ids, titles)


def test_bad_settings_and_queries_are_refused(index):
    with pytest.raises(ConfigError, match="unknown analysis"):
        Index.build(["نص"], analysis="porter")
    with pytest.raises(ConfigError, match="passage_chars 10"):
        Index.build(["نص"], passage_chars=10)
    with pytest.raises(ConfigError, match="give path="):
        Index.build(["نص"], resume=True)
    with pytest.raises(ConfigError, match="k 0"):
        index.search("نص", k=0)
    with pytest.raises(InputError, match="query: a query is a string"):
        index.search(b"x")
    with pytest.raises(InputError, match=r"queries\[1\]"):
        index.search_many(["نص", None])
    with pytest.raises(IndexError):
        index.document_text(3)


def test_rank_passages_ranks_one_long_context(shared_data):
    articles = json.loads((shared_data / "qa" / "arcd-train.json").read_text(encoding="utf-8"))["data"]
    paragraphs = [p for article in articles[:6] for p in article["paragraphs"]]
    context = "\n".join(p["context"] for p in paragraphs)
    found = 0
    for paragraph in paragraphs:
        qa = paragraph["qas"][0]
        hits = rank_passages(qa["question"], context, k=3)
        assert all(h.document == "0" and context[h.passage.start:h.passage.end] == h.text for h in hits)
        answer = context.index(paragraph["context"]) + qa["answers"][0]["answer_start"]
        found += any(h.passage.start <= answer < h.passage.end for h in hits)
    assert found >= 0.7 * len(paragraphs)
    assert rank_passages("سؤال", context, k=2) == Index.build([context]).search("سؤال", 2)
    with pytest.raises(InputError, match="text: a context is a string"):
        rank_passages("سؤال", None)


def test_rank_passages_checks_its_settings_before_its_cache():
    assert rank_passages("النيل", NILE, k=1)[0].text == NILE  # the index of NILE at 600 characters is now cached
    with pytest.raises(ConfigError, match="passage_chars 600.0"):  # equal to the cached 600, still refused
        rank_passages("النيل", NILE, passage_chars=600.0)
    with pytest.raises(ConfigError, match="passage_chars True"):
        rank_passages("النيل", NILE, passage_chars=True)
    with pytest.raises(ConfigError, match="an analysis name must be a string, not int"):
        rank_passages("النيل", NILE, analysis=5)


def test_an_analysis_that_is_no_string_is_a_config_error_not_a_traceback():
    from arabert_pipeline.retrieval.index import rank_passages

    with pytest.raises(ConfigError, match="must be a string"):
        rank_passages("سؤال", "نص طويل", analysis=["x"])
    with pytest.raises(ConfigError, match="unknown analysis 'x'.*arabertv02-light10[+]qwords, "):
        rank_passages("سؤال", "نص طويل", analysis="x")
