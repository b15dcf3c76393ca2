"""`arabert-pipeline answer`: one question, a JSON lines file, or the bundled demo questions.

    arabert-pipeline answer --question "أين تقع البتراء؟" --context "تقع مدينة البتراء في جنوب الأردن."
    arabert-pipeline answer --input questions.jsonl --output answers.jsonl     # {"id"?, "question", "context"} per line
    arabert-pipeline answer --demo
    arabert-pipeline answer --index runs/news-index --question "متى تأسست جامعة القاهرة؟"   # ask a collection
    arabert-pipeline answer --index runs/news-index --input questions.jsonl                 # {"id"?, "question"}

Nothing heavy is imported before the verb runs, so `arabert-pipeline --help` stays instant; with a model that has
a model.onnx (the shipped one does), torch and transformers are never imported.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from ..errors import InputError
from .core import (
    BACKENDS,
    BUNDLED_MODELS,
    DEFAULT_MODEL,
    MAX_CONTEXT_CHARS,
    MAX_QUESTION_CHARS,
    answers_of,
    check_text,
    surrogate_problem,
    text_problem,
)

if TYPE_CHECKING:
    from ..qa.transformer.decode import Answer
    from .core import Pipeline, Result

DEMO_FILE = Path(__file__).with_name("demo.json")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "answer",
        help="answer Arabic questions from a context with a QA model",
        description="Answer Arabic questions with a QA model: the default model shipped in the package "
        f"({', '.join(BUNDLED_MODELS)}), a QA model dir made by `arabert-pipeline finetune`, or a hub id (with "
        "--preprocessing). Answers are spans of the given context, or with --index of the documents of a collection "
        "(`arabert-pipeline index`), naming their document; the score is the probability that the answer is right "
        "(docs/answering.md).",
    )
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--question", help="one question (with --context, or with --index)")
    source.add_argument("--input", metavar="JSONL", help='JSON lines file, one {"id"?, "question", "context"} per line '
                        '({"id"?, "question"} with --index)')
    source.add_argument("--demo", action="store_true", help="answer the bundled demo questions")
    p.add_argument("--context", help="the passage that holds the answer to --question")
    p.add_argument("--index", metavar="DIR",
                   help="ask the collection indexed in DIR (made by `arabert-pipeline index`) instead of a context: "
                        "its best passages for each question are read, and each answer names its document (id and "
                        "title) with offsets into that document's text")
    p.add_argument("--output", metavar="JSONL",
                   help='with --input: write {"id", "answer", "score", "start", "end"} lines (with --index also '
                        '"document" and "title") to this new file (- for stdout, the default); only regular files are '
                        'written, never devices, FIFOs or symlinks')
    p.add_argument("--overwrite", action="store_true", help="replace an existing --output file")
    p.add_argument("--model", default=DEFAULT_MODEL,
                   help="bundled model name, QA model dir or hub id (default: %(default)s)")
    p.add_argument("--preprocessing", help="for models without arabert_pipeline.json: arabertv02, arabertv2 or none")
    p.add_argument("--top-k", type=int, default=1, help="answers per question (default: %(default)s)")
    p.add_argument("--allow-no-answer", action="store_true",
                   help="answer nothing (null) where the model judges that the context does not hold the answer")
    p.add_argument("--batch-size", type=int, default=32, help="windows per forward pass (default: %(default)s)")
    p.add_argument("--device", default="cpu", help="torch device (default: %(default)s)")
    p.add_argument("--backend", choices=BACKENDS, default="auto",
                   help="auto: ONNX Runtime when the model dir has a model.onnx (the shipped model does) and the "
                   "device is the CPU, else torch (default: %(default)s)")
    p.add_argument("--quantize", action=argparse.BooleanOptionalAction, default=None,
                   help="int8 dynamic quantization of the linear layers (CPU); --no-quantize for fp32 (default: the "
                   "model's own choice, made on dev: its arabert_pipeline.json's quantize_by_default)")
    p.add_argument("--decoding", choices=("max-score", "expected-f1"),
                   help="override the model's decoder: max-score = the most likely span (short answers), expected-f1 = "
                        "the span of highest expected F1 (default: the model's dev-chosen one)")
    p.add_argument("--max-context-chars", type=int, default=MAX_CONTEXT_CHARS,
                   help="refuse longer contexts (memory and time grow with the context; default: %(default)s)")
    p.add_argument("--max-question-chars", type=int, default=MAX_QUESTION_CHARS,
                   help="refuse longer questions (the model's reader reads all of a question; default: %(default)s)")
    p.add_argument("--spans-as-decoded", dest="whole_words", action="store_false",
                   help="return the model's spans as decoded, without widening them to whole words")
    p.set_defaults(run=run_answer)


def run_answer(args: argparse.Namespace) -> int:
    collection = args.index is not None  # ask the collection: questions only, answers naming their documents
    if collection:
        for flag, given in (("--context", args.context is not None), ("--demo", args.demo)):
            if given:
                raise InputError("not with --index: a collection is asked with --question or --input (questions "
                                 "alone); drop --index to answer from a context", field=flag)
    elif args.question is not None and args.context is None:
        raise InputError("--question needs --context (or --index DIR to ask a collection)", field="--context")
    if args.question is None and args.context is not None:
        raise InputError("--context goes with --question", field="--context")
    if args.output is not None and args.input is None:
        raise InputError("--output goes with --input", field="--output")
    if args.top_k < 1:
        raise InputError(f"must be ≥ 1, got {args.top_k}", field="--top-k")
    if args.max_context_chars < 1:
        raise InputError(f"must be ≥ 1, got {args.max_context_chars}", field="--max-context-chars")
    if args.max_question_chars < 1:
        raise InputError(f"must be ≥ 1, got {args.max_question_chars}", field="--max-question-chars")
    if args.output == "-":
        args.output = None
    if args.question is not None:  # check before the model loads: a typo should not cost a model load
        check_text(args.question, "--question", args.max_question_chars, "question")
        if not collection:
            check_text(args.context, "--context", args.max_context_chars)
    examples = read_jsonl(Path(args.input), args.max_context_chars, args.max_question_chars, collection=collection) \
        if args.input else read_demo() if args.demo else None
    index = None
    if collection:
        from ..retrieval.index import Index

        index = Index.open(args.index)  # before the model: a wrong or damaged directory should not cost a model load
    if args.output is not None:
        from ..outputs import check_not_input, claim_output_file

        claim_output_file(args.output, verb="answer", inputs=[args.input], overwrite=args.overwrite, flag="--output")
        if collection:  # nothing is written into the index directory either
            check_not_input(args.output, [args.index], "--output", within=True)
    _utf8_stdout()
    pipeline = _load_pipeline(args)
    if examples is None:
        found = pipeline.answer(args.question, args.context, top_k=args.top_k, allow_no_answer=args.allow_no_answer,
                                index=index)
        for rank, answer in enumerate((found or [None]) if args.top_k > 1 else [found], start=1):
            print(_describe(answer, rank if args.top_k > 1 else None))
        return 0
    try:
        results = pipeline.answer([e["question"] for e in examples],
                                  None if collection else [e["context"] for e in examples],
                                  top_k=args.top_k, allow_no_answer=args.allow_no_answer, index=index)
    except InputError as exc:  # Pipeline names question[i] / context[i]: name the file's line instead
        failing = failing_item(exc)
        if failing is None or not args.input:
            raise
        position, field, message = failing
        raise InputError(message, path=args.input, line=examples[position]["line"], field=field) from None
    if args.demo:
        print_demo(examples, results)
        return 0
    _write_records([result_record(e["id"], found, collection=collection)
                    for e, found in zip(examples, results, strict=True)], args.output)
    return 0


def _write_records(records: list[dict[str, Any]], output: str | None) -> None:
    """The answers' JSON lines on stdout (`output` None) or written atomically to `output`."""
    lines = [json.dumps(record, ensure_ascii=False) + "\n" for record in records]
    if output is None:
        sys.stdout.writelines(lines)
        return
    from ..artifacts.writes import atomic_write

    with atomic_write(output) as f:
        f.writelines(lines)
    print(f"{len(lines)} answers written to {output}", file=sys.stderr)


def read_jsonl(path: Path, max_context_chars: int | None = MAX_CONTEXT_CHARS,
               max_question_chars: int | None = MAX_QUESTION_CHARS, *, collection: bool = False
               ) -> list[dict[str, Any]]:
    """Examples {"id", "question", "context"} from a JSON lines file (`collection`: {"id", "question"}, asked of an
    index, and a line with a context is refused); blank lines skipped; ids default to line numbers.

    Every line is checked before the model loads, and an error names the file, the line and the field.
    """
    fields = ("question",) if collection else ("question", "context")
    examples = []
    for number, qid, record in json_records(path):
        if collection and "context" in record:
            raise InputError("a context is not read with --index (the collection is asked): drop the field, or "
                             "drop --index to answer from the contexts", path=path, line=number, field="context")
        for field in fields:
            if field not in record:
                raise InputError("missing", path=path, line=number, field=field)
            limit = max_context_chars if field == "context" else max_question_chars
            problem = text_problem(record[field], limit, field)
            if problem is not None:
                raise InputError(problem, path=path, line=number, field=field)
        examples.append({"id": qid, "line": number, **{field: record[field] for field in fields}})
    if not examples:
        raise InputError("no questions in the file", path=path)
    return examples


def json_records(path: Path) -> Iterator[tuple[int, str | int, dict[str, Any]]]:
    """(line number, id, object) of each non-blank line of a JSON lines file, its id the "id" field (a string or an
    integer, unique in the file) or the line number; an InputError names the file and the line of a bad one. `answer`,
    `classify` and `tag` read their files through it."""
    from ..artifacts.reads import json_line_id, parse_json

    seen: dict[str | int, int] = {}
    for number, line in text_lines(path):
        record = parse_json(line, path=path, line=number)
        if not isinstance(record, dict):
            raise InputError(f"expected a JSON object, got {type(record).__name__}", path=path, line=number)
        qid = json_line_id(record.get("id", number), path=path, line=number)
        if qid in seen:
            raise InputError(f"duplicate id {qid!r} (first on line {seen[qid]})", path=path, line=number, field="id")
        seen[qid] = number
        problem = surrogate_problem(qid) if isinstance(qid, str) else None
        if problem is not None:
            raise InputError(problem, path=path, line=number, field="id")
        yield number, qid, record


def failing_item(exc: InputError) -> tuple[int, str, str] | None:
    """(i, field, message) of a pipeline error naming item i of a list (`context[3]`, `inputs[3]`), for a verb to name
    the line it read that item from; None for any other error."""
    found = re.fullmatch(r"(\w+)\[(\d+)\]", exc.field or "")
    if found is None:
        return None
    return int(found.group(2)), found.group(1), str(exc).removeprefix(f"{exc.field}: ")


def text_lines(path: Path, stream: BinaryIO | None = None, *, lone_cr: bool = False) -> Iterator[tuple[int, str]]:
    """(line number, line) of each non-blank line of a UTF-8 file, or of the binary `stream` (stdin) named `path`; a
    byte-order mark at the start is dropped, as every other reader of the package drops it. `lone_cr`: a "\r" not
    before "\n" ends a line too (a text a line: classic Mac and some exporters end lines so, and the file would
    otherwise be one text); JSON lines end at "\n" only, a lone "\r" there being JSON whitespace."""
    from ..artifacts.reads import check_input_file

    if stream is None:
        check_input_file(path)
        try:
            stream = path.open("rb")
        except OSError as exc:
            raise InputError(f"unreadable ({exc.strerror or exc})", path=path) from None
    number = 0
    with stream as f:
        for data in f:
            if number == 0 and data.startswith(b"\xef\xbb\xbf"):  # a byte-order mark (Notepad writes one): not text
                data = data[3:]
            data = data.removesuffix(b"\n").removesuffix(b"\r")
            for piece in data.split(b"\r") if lone_cr else [data]:
                number += 1
                try:
                    line = piece.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise InputError(f"invalid UTF-8 at byte {exc.start + 1} of the line ({exc.reason})", path=path,
                                     line=number) from None
                if line.strip():
                    yield number, line


def result_record(qid: object, found: Result, *, collection: bool = False) -> dict[str, Any]:
    """The output line of one question: the best answer's fields, and with --top-k > 1 all of them under "top_k";
    `collection` (answers from an index): each with its "document" and "title" too (null with a null answer)."""
    answers = answers_of(found)
    best = answers[0] if answers else None
    record = {"id": qid, **_answer_fields(best, collection)}
    if isinstance(found, list):
        record["top_k"] = [_answer_fields(a, collection) for a in answers]
    return record


def _answer_fields(answer: Answer | None, collection: bool) -> dict[str, Any]:
    fields: dict[str, Any] = {"answer": None, "score": None, "start": None, "end": None}
    if answer is not None:
        fields = {"answer": answer.text, "score": _round(answer.score), "start": answer.start, "end": answer.end}
    if collection:
        fields["document"] = answer.document if answer is not None else None
        fields["title"] = answer.title if answer is not None else None
    return fields


def read_demo() -> list[dict[str, Any]]:
    demo = json.loads(DEMO_FILE.read_text(encoding="utf-8"))
    return [{"id": e["id"], "question": e["question"], "context": e["context"], "expected": e["answers"]["text"][0]}
            for e in demo]


def shares_a_word(predicted: str, expected: str) -> bool:
    """Whether two answers share a content word, as the question-overlap feature matches words (the demo's partial
    credit; `evaluate` scores properly)."""
    from ..qa.overlap import match_keys

    def keys(text: str) -> set[str]:
        return {key for word in text.split() for key in match_keys(word)}
    return bool(keys(predicted) & keys(expected))


def print_demo(examples: list[dict[str, Any]], results: list[Result]) -> None:
    matches = overlaps = 0
    for example, found in zip(examples, results, strict=True):
        answers = answers_of(found)
        best = answers[0] if answers else None
        matches += best is not None and best.text.strip() == example["expected"]
        overlaps += best is not None and shares_a_word(best.text, example["expected"])
        print(f"question:  {example['question']}")
        print(f"predicted: {best.text if best else '(no answer)'}" + (f"   [score {best.score:.2f}]" if best else ""))
        print(f"expected:  {example['expected']}")
        print()
    print(f"{matches}/{len(examples)} predicted answers equal the expected ones exactly, {overlaps}/{len(examples)} "
          "share a word with them")


def _describe(answer: Answer | None, rank: int | None) -> str:
    prefix = f"{rank}. " if rank is not None else ""
    if answer is None:
        return f"{prefix}(no answer)"
    indent = " " * len(prefix)
    lines = [f"{prefix}answer: {answer.text}",
             f"{indent}score: {answer.score:.4f}   span: [{answer.start}, {answer.end})"]
    if answer.document is not None:  # from an index: the span is in that document's text
        lines.append(f"{indent}document: {answer.document}" + (f"   title: {answer.title}" if answer.title else ""))
    return "\n".join(lines)


def _round(score: float) -> float:
    return round(float(score), 6)


def _load_pipeline(args: argparse.Namespace) -> Pipeline:
    from .core import Pipeline
    from .resolve import choose_backend

    if choose_backend(args.model, args.device, args.backend) == "torch":  # the ONNX backend never imports it
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # "Loading weights: 100%" would interleave with the answers
    return Pipeline(args.model, preprocessing=args.preprocessing, device=args.device, batch_size=args.batch_size,
                    quantize=args.quantize, whole_words=args.whole_words, backend=args.backend, decoding=args.decoding,
                    max_context_chars=args.max_context_chars, max_question_chars=args.max_question_chars)


def _utf8_stdout() -> None:
    # Under a non-UTF-8 locale (e.g. LANG=C on an old Python, or a Windows console) Arabic would raise or be mangled.
    if (sys.stdout.encoding or "").lower().replace("-", "") != "utf8" and hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(encoding="utf-8")
