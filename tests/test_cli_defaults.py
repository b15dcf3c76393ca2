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
