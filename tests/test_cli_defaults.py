"""Every verb's flag defaults are its config dataclass's: a flag named like a field either has the field's default or
None ("not given": the dataclass, or a tokenizer recipe, decides). No data needed."""
from __future__ import annotations

import argparse
import dataclasses

import pytest

from arabert_pipeline.cli import build_parser
from arabert_pipeline.evaluate.report import EvaluateConfig
from arabert_pipeline.preprocess.corpus import CorpusConfig
from arabert_pipeline.pretrain.config import PretrainConfig
from arabert_pipeline.qa.static.config import ReaderConfig
from arabert_pipeline.qa.transformer.config import FinetuneConfig
from arabert_pipeline.tokenizer.train import TokenizerConfig

VERBS = {"preprocess": CorpusConfig, "train-tokenizer": TokenizerConfig, "pretrain": PretrainConfig,
         "finetune": FinetuneConfig, "evaluate": EvaluateConfig, "train-reader": ReaderConfig}


def _verb_parser(verb: str) -> argparse.ArgumentParser:
    subparsers = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return subparsers.choices[verb]


def _default(field: dataclasses.Field):
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return dataclasses.MISSING


@pytest.mark.parametrize("verb", VERBS)
def test_flag_defaults_are_the_config_defaults(verb):
    fields = {field.name: field for field in dataclasses.fields(VERBS[verb])}
    checked, wrong = 0, []
    for action in _verb_parser(verb)._actions:
        if action.dest not in fields or action.default in (None, argparse.SUPPRESS):
            continue
        expected, given = _default(fields[action.dest]), action.default
        if isinstance(expected, tuple) and isinstance(given, str):  # comma-separated lists on the command line
            given = tuple(given.split(","))
        checked += 1
        if given != expected:
            wrong.append(f"--{action.dest}: flag {given!r}, {VERBS[verb].__name__} {expected!r}")
    assert not wrong, "\n".join(wrong)
    assert checked >= 5 or verb == "train-tokenizer"  # its flags override a recipe, so all default to "not given"


def _multi_value_flags(parser: argparse.ArgumentParser, verb: str = ""):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _multi_value_flags(sub, name)
        elif action.option_strings and action.nargs in ("+", "*"):
            yield verb, action


def test_a_repeated_multi_value_flag_adds_to_its_values_instead_of_replacing_them():
    """`--train a --train b` trains on both: with argparse's default store action the second flag silently replaced
    the first. A default list would be extended rather than replaced, so such flags default to empty."""
    flags = list(_multi_value_flags(build_parser()))
    assert len(flags) > 15
    for verb, action in flags:
        assert isinstance(action, argparse._ExtendAction), f"{verb} {action.option_strings[0]} keeps only its last use"
        assert not action.default, f"{verb} {action.option_strings[0]}: a non-empty default would be extended"
    args = build_parser().parse_args(["finetune", "--model", "m", "-o", "out", "--train", "a", "b", "--train", "c",
                                      "--dev", "d", "--dev", "e"])
    assert args.train == ["a", "b", "c"] and args.dev == ["d", "e"]
    args = build_parser().parse_args(["make-synthetic-qa", "corpus.txt", "-o", "out", "--hold-out", "h",
                                      "--types", "date", "--types", "number"])
    assert args.types == ["date", "number"]


def test_finetune_compile_reaches_the_training_loop_for_every_task_and_does_not_block_a_resume():
    """`finetune --compile` (torch.compile of the training steps, tested on the engine by the pretraining tests) is
    read by QA's config and the text tasks' alike, and a run may be resumed with or without it."""
    from arabert_pipeline.finetuning.config import TaskConfig
    from arabert_pipeline.finetuning.taskargs import task_config
    from arabert_pipeline.qa.transformer.cli import config_from_args

    common = ["finetune", "--model", "m", "-o", "out", "--train", "t.json"]
    qa = config_from_args(build_parser().parse_args([*common, "--compile"]))
    assert qa.compile and qa.loop_settings().compile
    assert not config_from_args(build_parser().parse_args(common)).loop_settings().compile
    assert "compile" not in qa.fingerprint()
    text = task_config(TaskConfig, build_parser().parse_args([*common, "--task", "classification", "--compile"]))
    assert text.compile and text.loop_settings().compile and "compile" not in text.fingerprint()
