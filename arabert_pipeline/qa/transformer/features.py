"""Question + context → model windows with a fast tokenizer, as Hugging Face's run_qa does.

Each (question, preprocessed context) pair becomes one or more windows of at most `max_seq_length` tokens: the
question first, then a slice of the context; consecutive slices overlap by `doc_stride` tokens
(truncation="only_second", return_overflowing_tokens, return_offsets_mapping). A training window is labelled with the
first and last token of the answer when the answer lies entirely inside its context slice, else with the CLS index.
Questions longer than `max_question_tokens` are cut (at a token boundary) so that every window keeps room for context.

With `question_overlap`, context tokens inside a word that the question also has (overlap.py) get token type 2
(`QUESTION_OVERLAP_TYPE`) instead of 1; the model needs `type_vocab_size` ≥ 3.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ...errors import ConfigError
from ..overlap import matching_word_spans

# Special tokens in a BERT pair: [CLS] question [SEP] context [SEP].
_PAIR_SPECIAL_TOKENS = 3
CONTEXT_TYPE, QUESTION_OVERLAP_TYPE = 1, 2


@dataclasses.dataclass
class Windows:
    """Tokenized windows; `offsets[w, t]` is the (start, end) of token t in the preprocessed context, -1 elsewhere."""

    input_ids: list[list[int]]
    token_type_ids: list[list[int]] | None
    example_index: np.ndarray  # window → index of its example
    offsets: np.ndarray  # (windows, max_seq_length, 2) int64
    start_positions: np.ndarray | None = None  # training labels (CLS index when the answer is not inside)
    end_positions: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.input_ids)

    def select(self, keep: np.ndarray) -> Windows:
        take = lambda array: array[keep] if array is not None else None  # noqa: E731  a one-line local helper
        return Windows(
            [self.input_ids[i] for i in keep],
            [self.token_type_ids[i] for i in keep] if self.token_type_ids is not None else None,
            self.example_index[keep],
            self.offsets[keep],
            take(self.start_positions),
            take(self.end_positions),
        )


def check_fast_tokenizer(tokenizer) -> None:
    if not getattr(tokenizer, "is_fast", False):
        raise ConfigError(
            f"{type(tokenizer).__name__} is not a fast (Rust) tokenizer: QA windows need its offset mapping"
        )


def build_windows(
    tokenizer,
    questions: list[str],
    contexts: list[str],
    *,
    max_seq_length: int = 384,
    doc_stride: int = 128,
    max_question_tokens: int = 64,
    answer_spans: list[tuple[int, int] | None] | None = None,
    question_overlap: bool = False,
) -> Windows:
    """Tokenize pairs into windows; with `answer_spans` (char spans in `contexts`, None = unlabelled) add labels."""
    check_fast_tokenizer(tokenizer)
    question_room = max_seq_length - doc_stride - _PAIR_SPECIAL_TOKENS - 1
    if question_room < 1:
        raise ConfigError(f"doc_stride {doc_stride} leaves no room in max_seq_length {max_seq_length}")
    questions = truncate_questions(tokenizer, questions, min(max_question_tokens, question_room))
    encoded = tokenizer(
        questions,
        contexts,
        truncation="only_second",
        max_length=max_seq_length,
        stride=doc_stride,
        return_overflowing_tokens=True,
        return_offsets_mapping=True,
        padding=False,
    )
    n = len(encoded["input_ids"])
    example_index = np.asarray(encoded["overflow_to_sample_mapping"], dtype=np.int64)
    offsets = np.full((n, max_seq_length, 2), -1, dtype=np.int64)
    for w in range(n):
        in_context = np.asarray([s == 1 for s in encoded.sequence_ids(w)])
        spans = np.asarray(encoded["offset_mapping"][w], dtype=np.int64).reshape(-1, 2)
        offsets[w, : len(spans)][in_context] = spans[in_context]
    token_types = encoded.get("token_type_ids")
    if question_overlap:
        token_types = overlap_token_types(questions, contexts, encoded, offsets, example_index)
    windows = Windows(encoded["input_ids"], token_types, example_index, offsets)
    if answer_spans is not None:
        cls = tokenizer.cls_token_id
        cls_index = [ids.index(cls) if cls in ids else 0 for ids in windows.input_ids]
        windows.start_positions, windows.end_positions = label_windows(
            offsets, example_index, answer_spans, np.asarray(cls_index)
        )
    return windows


def overlap_token_types(questions, contexts, encoded, offsets: np.ndarray,
                        example_index: np.ndarray) -> list[list[int]]:
    """The pair's token types (0 question, 1 context), with 2 on context tokens of words shared with the question."""
    matched_chars = {}
    for e in np.unique(example_index):
        matched = np.zeros(len(contexts[e]) + 1, dtype=bool)
        for start, end in matching_word_spans(questions[e], contexts[e]):
            matched[start:end] = True
        matched_chars[e] = matched
    given = encoded.get("token_type_ids")
    types = []
    for w, e in enumerate(example_index):
        n = len(encoded["input_ids"][w])
        if given is not None:
            row = np.asarray(given[w], dtype=np.int64)
        else:  # tokenizers without segment ids (RoBERTa-style): derive them from the pair structure
            row = np.asarray([CONTEXT_TYPE if s == 1 else 0 for s in encoded.sequence_ids(w)], dtype=np.int64)
        starts = offsets[w, :n, 0]
        context = np.flatnonzero(starts >= 0)
        row[context[matched_chars[e][starts[context]]]] = QUESTION_OVERLAP_TYPE
        types.append(row.tolist())
    return types


def truncate_questions(tokenizer, questions: list[str], limit: int) -> list[str]:
    """Cut each question after its `limit`-th token (rare: only very long questions)."""
    encoded = tokenizer(questions, add_special_tokens=False, return_offsets_mapping=True)
    return [
        q if len(spans) <= limit else q[: spans[limit - 1][1]]
        for q, spans in zip(questions, encoded["offset_mapping"], strict=True)
    ]


def label_windows(
    offsets: np.ndarray, example_index: np.ndarray, answer_spans: list, cls_index: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Start/end token of the answer in each window, or the CLS index when it is not fully inside the window."""
    starts, ends = cls_index.copy(), cls_index.copy()
    for w, e in enumerate(example_index):
        span = answer_spans[e]
        if span is None:
            continue
        first_char, end_char = span
        context = np.flatnonzero(offsets[w, :, 0] >= 0)
        if context.size == 0:
            continue
        token_starts, token_ends = offsets[w, context, 0], offsets[w, context, 1]
        if token_starts[0] > first_char or token_ends[-1] < end_char:
            continue
        # The start token is the last one starting at or before the answer; the end token the first one ending at
        # or after it, so an answer that begins or ends inside a token still gets the whole token.
        starts[w] = context[np.flatnonzero(token_starts <= first_char)[-1]]
        ends[w] = context[np.flatnonzero(token_ends >= end_char)[0]]
    return starts, ends


def collate(windows: Windows, rows, pad_id: int, labels: bool = False, multiple: int = 1) -> dict:
    """Right-padded tensors for the given window rows, their width rounded up to a `multiple`: the torch backend's
    batches (qa/transformer/model.py) and, with `labels`, fine-tuning's.

    Training pads to multiples of 32 so that a run sees a handful of batch shapes: the CPU kernels keep memory for
    every new shape (pretraining's batches are shaped the same way, for the same reason).
    """
    import torch

    length = max(len(windows.input_ids[r]) for r in rows)
    length = -(-length // multiple) * multiple
    input_ids = torch.full((len(rows), length), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(rows), length), dtype=torch.long)
    token_type_ids = torch.zeros((len(rows), length), dtype=torch.long)
    for i, r in enumerate(rows):
        ids = windows.input_ids[r]
        input_ids[i, : len(ids)] = torch.tensor(ids)
        attention_mask[i, : len(ids)] = 1
        if windows.token_type_ids is not None:
            token_type_ids[i, : len(ids)] = torch.tensor(windows.token_type_ids[r])
    batch = {"input_ids": input_ids, "attention_mask": attention_mask}
    if windows.token_type_ids is not None:
        batch["token_type_ids"] = token_type_ids
    if labels:
        if windows.start_positions is None or windows.end_positions is None:
            raise ValueError("labels asked of windows built without them (build_windows without answers)")
        batch["start_positions"] = torch.as_tensor(windows.start_positions[rows])
        batch["end_positions"] = torch.as_tensor(windows.end_positions[rows])
    return batch
