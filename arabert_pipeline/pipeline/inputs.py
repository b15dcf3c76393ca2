"""What `Pipeline` and the task pipelines accept before any model runs: the shipped models' names and the backends,
the length limits, and the checks of every question, context and text (one place, so core.py, tasks.py, the CLIs and
serve refuse the same inputs with the same words)."""
from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import TypeAlias, cast

from ..artifacts.models import PACKAGED_MODELS_DIR, SHIPPED_MODELS
from ..errors import ConfigError, InputError

MODELS_DIR = PACKAGED_MODELS_DIR
# The QA models shipped inside the package: name → directory under arabert_pipeline/models/.
BUNDLED_MODELS = {name: folder for name, folder in SHIPPED_MODELS.items() if folder == "arabert-mini"}
DEFAULT_MODEL = "arabert"
BACKENDS = ("auto", "onnx", "torch")
# The longest context one call accepts, in characters. Memory and time grow with the context (measured on the shipped
# model: 200k characters took 9 s and 234 MB); a 50-million-character paste would take gigabytes and minutes, so a
# context past this is refused with its length (raise it with Pipeline(max_context_chars=...) / --max-context-chars).
MAX_CONTEXT_CHARS = 100_000
# The longest question one call accepts, in characters. The transformer reads the first 64 tokens of a question (~250
# characters) but the reader companion's LSTMs run over all of it: a 500k-word question took 48 s and 8.7 GB. The
# longest question of ARCD, XQuAD, MLQA, TyDiQA and AQAD is 221 characters; 1,000 leaves room for any real one.
MAX_QUESTION_CHARS = 1_000
# What each limit's error tells the user to do.
_LIMIT_HINTS = {"context": "raise the limit with max_context_chars= / --max-context-chars, or split the text",
                "text": "raise the limit with max_chars= / --max-chars, or split the text",
                "question": "raise the limit with max_question_chars= / --max-question-chars, or shorten it"}
# Many questions, contexts or texts: a list or a tuple of str (any other sequence is refused, as a str would be read
# as one).
Texts: TypeAlias = list[str] | tuple[str, ...]


def has_arabic_letter(text: str) -> bool:
    """True if the text holds a letter of the Arabic script (digits, punctuation and diacritics do not count)."""
    return any(ch.isalpha() and _is_arabic_block(ord(ch)) for ch in text)


def _is_arabic_block(code: int) -> bool:
    return (0x0600 <= code <= 0x06FF or 0x0750 <= code <= 0x077F or 0x0870 <= code <= 0x08FF
            or 0xFB50 <= code <= 0xFDFF or 0xFE70 <= code <= 0xFEFF)


def text_problem(value: object, max_chars: int | None = None, kind: str = "context") -> str | None:
    """Why `value` cannot be a question or a context (`kind`: not a str, blank, no letter or digit, longer than
    `max_chars`), or None if it can."""
    if not isinstance(value, str):
        return f"must be a str, got {type(value).__name__}"
    if not value.strip():
        return "is empty or whitespace only"
    if max_chars is not None and len(value) > max_chars:
        return f"is {len(value):,} characters long, more than the {max_chars:,} allowed ({_LIMIT_HINTS[kind]})"
    surrogate = surrogate_problem(value)
    if surrogate is not None:
        return surrogate
    if not any(ch.isalnum() for ch in value):
        return f"has no letter or digit, so there is nothing to answer with: {_preview(value)!r}"
    return None


def warn_non_arabic(questions: Sequence[str], contexts: Sequence[str], stacklevel: int = 3) -> None:
    """One warning for the texts without an Arabic letter: they are answered, but by a model that reads Arabic.
    `stacklevel` as warnings.warn's, counted from here: it names the user's line that asked."""
    for name, texts in (("question", questions), ("context", contexts)):
        missing = [i for i, text in enumerate(texts) if not has_arabic_letter(text)]
        if missing:
            where = f"the {name} has" if len(texts) == 1 else \
                f"{len(missing)} of {len(texts)} {name}s (first: {name}[{missing[0]}]) have"
            warnings.warn(f"{where} no Arabic letter: answered anyway, by a model trained on Arabic text",
                          stacklevel=stacklevel)


def surrogate_problem(text: str) -> str | None:
    """A lone surrogate (a JSON "\\ud800" escape, undecodable bytes in argv) is no Unicode text: the tokenizer and
    any UTF-8 output would fail on it."""
    for index, char in enumerate(text):
        if "\ud800" <= char <= "\udfff":
            return f"holds a lone surrogate U+{ord(char):04X} at character {index}: not valid Unicode text"
    return None


def check_text(value: object, name: str, max_chars: int | None = None, kind: str = "context") -> str:
    """`value` if it can be a question or a context, else an InputError naming the argument (e.g. "context[3]")."""
    problem = text_problem(value, max_chars, kind)
    if problem is not None:
        raise InputError(problem, field=name)
    return cast(str, value)  # text_problem refuses anything but a str


def check_inputs(question: object, context: object, max_context_chars: int | None = MAX_CONTEXT_CHARS,
                 max_question_chars: int | None = MAX_QUESTION_CHARS) -> tuple[list[str], list[str]]:
    """Both str, or both lists/tuples of str of the same non-zero length; every text checked."""
    if isinstance(question, str) and isinstance(context, str):
        return ([check_text(question, "question", max_question_chars, "question")],
                [check_text(context, "context", max_context_chars)])
    if not isinstance(question, (list, tuple)) or not isinstance(context, (list, tuple)):
        for name, value in (("question", question), ("context", context)):
            if not isinstance(value, (str, list, tuple)):
                raise InputError(f"must be a str or a list of str, got {type(value).__name__}", field=name)
        raise InputError("pass question and context both as str, or both as lists of the same length "
                         f"(got {type(question).__name__} and {type(context).__name__})", field="question/context")
    if len(question) != len(context):
        raise InputError(f"{len(question)} questions but {len(context)} contexts: the lists must have the same length",
                         field="question/context")
    if not question:
        raise InputError("empty lists: nothing to answer", field="question/context")
    return ([check_text(q, f"question[{i}]", max_question_chars, "question") for i, q in enumerate(question)],
            [check_text(c, f"context[{i}]", max_context_chars) for i, c in enumerate(context)])


def check_positive(name: str, value: object) -> int:
    """`value` if it is a positive integer (not a bool), else a ConfigError naming the option `name`."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(f"{name} must be a positive integer, got {value!r}")
    return value


def check_top_k(top_k: object) -> int:
    if not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 1:
        raise InputError(f"must be a positive integer, got {top_k!r}", field="top_k")
    return top_k


def _preview(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[:limit] + "…"
