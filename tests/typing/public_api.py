"""What a user's type checker infers from the public API (issue 61): mypy checks this file with the package
(pyproject.toml's [tool.mypy] files; `scripts/check`), so an annotation that loosens a result to Any, or an overload
that stops matching its call, fails the check. Never run: it only has to type-check."""
from __future__ import annotations

from typing import Any

from typing_extensions import assert_type  # typing.assert_type is 3.11+; mypy knows both

from arabert_pipeline import Index, Pipeline
from arabert_pipeline.pipeline.tasks import TextClassificationPipeline, TokenClassificationPipeline
from arabert_pipeline.qa.transformer.decode import Answer


def answers(qa: Pipeline, index: Index) -> None:
    assert_type(Pipeline("arabert"), Pipeline)
    # One question: its best Answer or None; with top_k, a list of Answers may come instead.
    assert_type(qa.answer("س", "ن"), Answer | None)
    assert_type(qa.answer("س", "ن", top_k=3), Answer | list[Answer] | None)
    assert_type(qa.answer("س", index=index), Answer | None)
    assert_type(qa.answer_index("س", index, allow_no_answer=True), Answer | None)
    # A list of questions: one result each.
    assert_type(qa.answer(["س"], ["ن"]), list[Answer | None])
    assert_type(qa.answer(("س",), ("ن",), 2), list[Answer | list[Answer] | None])
    assert_type(qa.answer_index(["س"], index), list[Answer | None])
    found = qa.answer("س", "ن")
    if found is not None:
        assert_type(found.text, str)
        assert_type(found.score, float)
    hf = qa(question="س", context="ن")
    assert_type(hf, dict[str, Any] | list[dict[str, Any]] | list[dict[str, Any] | list[dict[str, Any]]])


def tasks(sentiment: TextClassificationPipeline, ner: TokenClassificationPipeline) -> None:
    assert_type(sentiment("نص", top_k=None), list[Any])
    assert_type(sentiment.labels, list[str])
    assert_type(ner("نص"), list[Any])
