"""`arabert-pipeline classify` and `tag`: the text tasks' answering verbs (pipeline/tasks.py), one JSON line per text.

    arabert-pipeline classify "الخدمة ممتازة" "التطبيق بطيء جدا"          # texts as arguments
    cat tweets.txt | arabert-pipeline classify                          # one text per line of stdin
    arabert-pipeline tag --input texts.jsonl --output entities.jsonl    # {"id"?, "text"} per line (.txt: a text a line)

classify writes {"id", "label", "score"} per text ({"id", "labels": [{"label", "score"}, ...]} with --top-k > 1), tag
{"id", "entities": [{"entity_group", "score", "word", "start", "end"}]}, start / end in code points of the text as
given. The id is the input line's "id", else the text's line number (or its position among the arguments). Every text
is checked before the model loads, with an error naming the file, the line and the field.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any, BinaryIO

from ..errors import InputError
from .inputs import BACKENDS, text_problem

VERBS = {  # verb → (task, default model, what it does, the fine-tuning that makes its models, output fields)
    "classify": ("sentiment", "arabert-sentiment", "label texts (sentiment by default) with a text-classification "
                 "model", "classification", '{"id", "label", "score"}'),
    "tag": ("ner", "arabert-ner", "find the named entities of texts (PERS, LOC, ORG, MISC by default) with a "
            "token-classification model", "ner", '{"id", "entities": [{"entity_group", "score", "word", "start", '
            '"end"}]}, start / end in code points of the text as given'),
}
STDIN = "-"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from .tasks import MAX_TEXT_CHARS

    for verb, (task, model, what, finetune, shape) in VERBS.items():
        p = subparsers.add_parser(
            verb, help=what,
            description=f"{what[0].upper()}{what[1:]}: the model shipped in the package ({model}) or a model dir made "
            f"by `arabert-pipeline finetune --task {finetune}`. Texts come from the arguments, from --input, or one "
            f"per line of stdin. Output: one JSON line per text, {shape}, in Hugging Face's pipeline shapes.")
        p.add_argument("texts", nargs="*", metavar="TEXT", help="texts to read (none: --input, else stdin)")
        p.add_argument("--input", metavar="FILE",
                       help='JSON lines, one {"id"?, "text"} per line; a .txt file or - (stdin): one text per line')
        p.add_argument("--output", metavar="JSONL", help="write the lines to this new file (default, or -: stdout); "
                                                         "only regular files are written")
        p.add_argument("--overwrite", action="store_true", help="replace an existing --output file")
        p.add_argument("--model", default=model, help=f"shipped task model name or model dir (default: {model})")
        p.add_argument("--preprocessing", help="for model dirs without arabert_pipeline.json: arabertv02, arabertv2 "
                                               "or none")
        if verb == "classify":
            p.add_argument("--top-k", type=int, default=1, help="labels per text, best first (default: 1)")
        p.add_argument("--batch-size", type=int, default=32, help="texts per forward pass (default: %(default)s)")
        p.add_argument("--device", default="cpu", help="torch device (default: %(default)s)")
        p.add_argument("--backend", choices=BACKENDS, default="auto",
                       help="auto: ONNX Runtime when the model dir has a model.onnx (the shipped ones do) and the "
                            "device is the CPU, else torch (default: %(default)s)")
        p.add_argument("--max-chars", type=int, default=MAX_TEXT_CHARS,
                       help="refuse longer texts (default: %(default)s)")
        p.set_defaults(run=run_task_verb, task=task)


def read_texts(path: Path, max_chars: int, stream: BinaryIO | None = None) -> list[dict[str, Any]]:
    """{"id", "text"} of each text of a file: JSON lines {"id"?, "text"}, or one text per non-blank line for a .txt
    file or a `stream` (stdin); every text checked, an InputError naming the file, the line and the field."""
    from .cli import json_records, text_lines

    records: Iterable[tuple[int, str | int, dict[str, Any]]]
    if stream is not None or path.suffix.lower() == ".txt":
        records = [(number, number, {"text": line}) for number, line in text_lines(path, stream, lone_cr=True)]
    else:
        records = json_records(path)
    found = []
    for number, identifier, record in records:
        if "text" not in record:
            raise InputError("missing", path=path, line=number, field="text")
        problem = text_problem(record["text"], max_chars, "text")
        if problem is not None:
            raise InputError(problem, path=path, line=number, field="text")
        found.append({"id": identifier, "text": record["text"], "line": number})
    if not found:
        raise InputError("no texts", path=path)
    return found


def run_task_verb(args: argparse.Namespace) -> int:
    from ..outputs import OutputLock, claim_output_file

    for flag, value in (("--max-chars", args.max_chars), ("--batch-size", args.batch_size),
                        ("--top-k", getattr(args, "top_k", 1))):
        if value < 1:
            raise InputError(f"must be ≥ 1, got {value}", field=flag)
    if args.texts and args.input is not None:
        raise InputError("give texts as arguments or --input, not both", field="--input")
    if args.output == STDIN:  # as `answer --output -`: stdout, never a file named "-"
        args.output = None
    if args.texts:
        records = []
        for number, text in enumerate(args.texts, start=1):
            problem = text_problem(text, args.max_chars, "text")
            if problem is not None:
                raise InputError(problem, field=f"TEXT {number}")
            records.append({"id": number, "text": text, "line": number})
    elif args.input not in (None, STDIN):
        records = read_texts(Path(args.input), args.max_chars)
    elif args.input is None and sys.stdin.isatty():  # nothing piped in: waiting for typed lines would look hung
        raise InputError("no texts: give them as arguments, with --input FILE, or on stdin", field="TEXT")
    else:  # checked whole before the model loads, as a file is
        records = read_texts(Path("<stdin>"), args.max_chars, stream=sys.stdin.buffer)
    if args.output is None:
        return answer_texts(args, records)

    def claim() -> None:
        claim_output_file(args.output, verb=args.verb, inputs=[args.input] if args.input not in (None, STDIN) else [],
                          overwrite=args.overwrite, flag="--output")

    claim()  # refused before the lock and the model: nothing made for a run that cannot write
    # Claimed again under the lock, held until the file is written: a concurrent run on this --output is refused, and
    # one that finished meanwhile left a file the claim sees, instead of the later run replacing it unasked.
    with OutputLock(args.output, args.verb):
        claim()
        return answer_texts(args, records)


def answer_texts(args: argparse.Namespace, records: list[dict[str, Any]]) -> int:
    """Label the texts and write the output lines to stdout or --output (claimed by the caller)."""
    from .cli import _utf8_stdout, failing_item
    from .tasks import TextClassificationPipeline, resolve_task_model, task_backend, task_pipeline

    if task_backend(resolve_task_model(args.model, args.task)[0], args.device, args.backend) == "torch":
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # "Loading weights: 100%" would come between the output lines
    pipeline = task_pipeline(args.model, args.task, preprocessing=args.preprocessing, device=args.device,
                             batch_size=args.batch_size, backend=args.backend, max_chars=args.max_chars)
    texts = [r["text"] for r in records]
    source = None if args.texts else Path(args.input) if args.input not in (None, STDIN) else Path("<stdin>")
    try:
        if isinstance(pipeline, TextClassificationPipeline):  # classify
            results = pipeline(texts, top_k=args.top_k)
            lines = [{"id": r["id"], **(found if args.top_k == 1 else {"labels": found})}
                     for r, found in zip(records, results, strict=True)]
        else:
            lines = [{"id": r["id"], "entities": found} for r, found in zip(records, pipeline(texts), strict=True)]
    except InputError as exc:  # the pipeline names inputs[i]: name the argument or the file's line instead
        failing = failing_item(exc)
        if failing is None:
            raise
        index, _, message = failing
        line = records[index]["line"]
        if source is None:
            raise InputError(message, field=f"TEXT {line}") from None
        raise InputError(message, path=source, line=line, field="text") from None
    out = [json.dumps(line, ensure_ascii=False) + "\n" for line in lines]
    if args.output is None:
        _utf8_stdout()
        sys.stdout.writelines(out)
        return 0
    from ..artifacts.writes import atomic_write

    with atomic_write(args.output) as f:
        f.writelines(out)
    print(f"{len(out)} lines written to {args.output}", file=sys.stderr)
    return 0

