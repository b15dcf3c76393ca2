"""A `tokenizers.Tokenizer` called like a transformers fast tokenizer, for every task's ONNX backend (no transformers).

QA's features.py builds windows through a transformers fast tokenizer's call (pairs, truncation="only_second", stride,
overflowing tokens, offsets). That call sets truncation and stride on the Rust tokenizer underneath, runs
`encode_batch`, and lists each encoding followed by its overflow: `TokenizerAdapter` does the same on the model's
tokenizer.json, so `build_windows` runs unchanged on it and the windows, ids, token types and offsets are the same
(tests/test_onnx.py compares them on ARCD-test). Classification and NER call it on single texts with truncation and
offsets, as their torch paths call transformers. Only the arguments those callers pass are supported.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..artifacts.reads import read_json_file
from ..errors import ConfigError
from ..weights.shared_tokenizer import read_tokenizer_json

# transformers 5's generic fast tokenizer returns these when tokenizer_config.json lists none (4.x's added
# token_type_ids); our tokenizer writers always list them (tokenizer/export.py save_pretrained_tokenizer).
DEFAULT_INPUT_NAMES = ("input_ids", "attention_mask")
class Encoded(dict):
    """What a transformers tokenizer call returns, as far as features.py reads it."""

    def __init__(self, data: dict[str, Any], encodings: list):
        super().__init__(data)
        self.encodings = encodings

    def sequence_ids(self, index: int) -> list[int | None]:
        return self.encodings[index].sequence_ids


class TokenizerAdapter:
    """A `tokenizers.Tokenizer` called like a transformers fast tokenizer (the arguments features.py uses)."""

    is_fast = True
    _STRATEGIES = {True: "longest_first", "longest_first": "longest_first", "only_first": "only_first",
                   "only_second": "only_second"}

    def __init__(self, backend, *, cls_token: str = "[CLS]", pad_token: str = "[PAD]", sep_token: str = "[SEP]",
                 model_input_names: tuple[str, ...] = DEFAULT_INPUT_NAMES):
        self.backend = backend
        self.cls_token_id = backend.token_to_id(cls_token)
        self.sep_token_id = backend.token_to_id(sep_token)
        self.pad_token_id = backend.token_to_id(pad_token)
        self.returns_token_types = "token_type_ids" in model_input_names

    @classmethod
    def from_directory(cls, directory: str | os.PathLike) -> TokenizerAdapter:
        from tokenizers import Tokenizer

        directory = Path(directory)
        text, path = read_tokenizer_json(directory)
        try:
            backend = Tokenizer.from_str(text)
        except Exception as exc:  # the Rust library raises plain Exceptions for any malformed file
            raise ConfigError(f"{path}: not a tokenizers file ({exc})") from exc
        config_path = directory / "tokenizer_config.json"
        config = read_json_file(config_path) if config_path.is_file() else {}
        settings: dict[str, Any] = {key: value for key in ("cls_token", "pad_token", "sep_token")
                                    if isinstance(value := config.get(key), str)}
        if isinstance(inputs := config.get("model_input_names"), list):
            settings["model_input_names"] = tuple(inputs)
        return cls(backend, **settings)

    def __len__(self) -> int:
        return self.backend.get_vocab_size(with_added_tokens=True)

    def __call__(self, text: list[str], text_pair: list[str] | None = None, *, add_special_tokens: bool = True,
                 truncation: bool | str = False, max_length: int | None = None, stride: int = 0,
                 return_overflowing_tokens: bool = False, return_offsets_mapping: bool = False,
                 padding: bool = False) -> Encoded:
        if padding:
            raise NotImplementedError("TokenizerAdapter does not pad: QA windows are padded when batched")
        if truncation:
            if truncation not in self._STRATEGIES or max_length is None:
                raise NotImplementedError(f"truncation={truncation!r} with max_length={max_length!r}")
            self.backend.enable_truncation(max_length, stride=stride, strategy=self._STRATEGIES[truncation],
                                           direction="right")
        else:
            self.backend.no_truncation()
        self.backend.no_padding()
        inputs = list(zip(text, text_pair, strict=True)) if text_pair is not None else list(text)
        encodings, sample = [], []
        for index, encoding in enumerate(self.backend.encode_batch(inputs, add_special_tokens=add_special_tokens)):
            windows = [encoding, *encoding.overflowing] if return_overflowing_tokens else [encoding]
            encodings.extend(windows)
            sample.extend([index] * len(windows))
        data: dict[str, Any] = {"input_ids": [e.ids for e in encodings]}
        if self.returns_token_types:
            data["token_type_ids"] = [e.type_ids for e in encodings]
        data["attention_mask"] = [e.attention_mask for e in encodings]
        if return_offsets_mapping:
            data["offset_mapping"] = [e.offsets for e in encodings]
        if return_overflowing_tokens:
            data["overflow_to_sample_mapping"] = sample
        return Encoded(data, encodings)
