"""The "span-selection" objective: recurring span selection (Splinter, Ram et al. 2021) shaped as extractive QA.

In a packed passage, find the spans (1–10 tokens of whole words, starting with a content word, ending with a content
word or a `+x` suffix) that occur more than once; take one such span, keep one occurrence (the answer) and replace
the others by a question token. One occurrence becomes the question: the sentence around it (bounded by `.`/`!`/`?`/
`؟`, by the neighbouring occurrences and by a token budget), with the span replaced by the question token. That
sentence is cut out of the passage, and the model reads

    [CLS] question [SEP] rest of the passage [SEP]      (token types 0 … 0 1 … 1)

and points with start/end logits at the kept occurrence: the reading-comprehension problem without labelled data.
A passage without any recurring span gives an unanswerable example (a unique content word is the blank, cut out
with its sentence), labelled [CLS] at 0/0, the convention the QA stage uses for windows without the answer.

Why this layout rather than Splinter's many [QUESTION] tokens with its QASS head: the model is a plain
`BertForQuestionAnswering` / `ElectraForQuestionAnswering`, so the pretrained `qa_outputs` head, the question/passage
segments and token types are exactly what QA fine-tuning uses; the export loads with `AutoModelForQuestionAnswering`
and fine-tunes with the QA stage unchanged (no [QUESTION] token in real questions, no custom head). The price is one
question per sequence instead of up to 30; on a CPU budget that is a real cost, so this objective is meant as a short
phase after MLM/ELECTRA (`--init-from`), as Splinter's own low-resource results suggest it helps most.

The question token is the tokenizer's [MASK]: every tokenizer has it (ours, mBERT's, AraELECTRA's), so the vocabulary,
the tokenizer files and `--init-from` vocabulary checks stay those of the base model, and after MLM (or ELECTRA's
generator, which shares embeddings with the discriminator) its embedding already means "a missing piece here".
Only [MASK] standing for a whole span rather than one token is new.

Words are the whitespace-delimited words of data.py (`word_starts`), so with Farasa segmentation `ال+` and `+ها` are
words of their own; they count as function words, like the stopwords below and punctuation.
"""
from __future__ import annotations

import unicodedata
from collections import Counter, defaultdict
from dataclasses import dataclass
from itertools import pairwise

import numpy as np
import torch
from torch import nn

from ..errors import ConfigError
from ..weights.loading import from_pretrained
from .config import bert_config_kwargs
from .data import BatchShape, Example, SpecialIds, padded_shape, row_lengths
from .objectives import check_init_from, init_model_dir

MAX_SPAN_TOKENS = 10  # Splinter's max_span_length
MAX_QUESTION_TOKENS = 64  # as HF's QA pipeline (max_question_len); at most a quarter of the sequence
KIND_CACHE_SIZE = 1 << 20
SENTENCE_END = frozenset(".!?؟")
# Arabic function words as the AraBERT preprocessing writes them (diacritics gone, hamza forms kept). A span may not
# start or end with one. Written out because no maintained package we depend on ships an Arabic list, and a few dozen
# words (plus punctuation and the `+` clitics) are all the span filter needs.
STOPWORDS = frozenset("""
في من على علي إلى الى عن مع أن ان إن لن لم لا ما ماذا هل قد لقد كان كانت يكون تكون كانوا هو هي هم هن هما أنا انا
نحن أنت انت أنتم هذا هذه ذلك تلك هؤلاء أولئك هناك هنا الذي التي الذين اللذين اللتين اللواتي اللاتي و ف ب ل ك ثم
أو او أم بل لكن حتى إذا اذا إذ لو كل بعض غير أي اي بين عند عندما حيث كما منذ خلال بعد قبل فوق تحت أمام امام حول ضد
دون لدى له لها لهم به بها فيه فيها منه منها عليه عليها إليه اليه وقد وفي ومن وعلى والى وإلى وأن وان كذلك أيضا ايضا
أكثر اكثر فقط جدا ذات يا إلا الا لأن لان سوف ليس ليست تم وهو وهي وكان وكانت ولا وما التى الى فى عليه إنه انه أنه
""".split())


@dataclass
class SpanExample:
    """One question/passage sequence; `answer` is (start, end) inclusive in `input_ids`, (0, 0) when unanswerable."""

    input_ids: list[int]
    token_type_ids: list[int]
    answer: tuple[int, int]


class SpanSelectionCollator:
    """Packed sequences → span-selection examples → padded tensors (`start_positions`/`end_positions` as HF QA)."""

    def __init__(self, tokenizer, specials: SpecialIds, max_seq_length: int, shape: BatchShape | None = None):
        self.specials, self.max_seq_length, self.shape = specials, max_seq_length, shape
        self.question_budget = min(MAX_QUESTION_TOKENS, max_seq_length // 4)
        pieces = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
        # The text of each token without its WordPiece `##` / SentencePiece `▁` mark, to spell words out.
        self.piece_text = [p[2:] if p.startswith("##") else p.lstrip("▁") for p in pieces]
        self.special_ids = set(tokenizer.all_special_ids)
        self.kinds: dict[tuple[int, ...], str] = {}  # word → kind; classifying is most of the collator's time

    def __call__(self, examples: list[Example], rng: np.random.Generator) -> dict[str, torch.Tensor]:
        built = [self.example(e, rng) for e in examples]
        rows, width = padded_shape(built, self.shape)
        ids = np.full((rows, width), self.specials.pad, dtype=np.int64)
        types = np.zeros((rows, width), dtype=np.int64)
        # Padding rows point at `width`, the index Hugging Face's QA loss ignores.
        answers = np.full((rows, 2), width, dtype=np.int64)
        for row, b in enumerate(built):
            ids[row, : len(b.input_ids)] = b.input_ids
            types[row, : len(b.token_type_ids)] = b.token_type_ids
            answers[row] = b.answer
        mask = (np.arange(width) < row_lengths(built, rows)[:, None]).astype(np.int64)
        return {
            "input_ids": torch.from_numpy(ids),
            "token_type_ids": torch.from_numpy(types),
            "attention_mask": torch.from_numpy(mask),
            "start_positions": torch.from_numpy(answers[:, 0].copy()),
            "end_positions": torch.from_numpy(answers[:, 1].copy()),
        }

    # ------------------------------------------------------------------------------------------- words and spans

    def words(self, example: Example) -> tuple[list[tuple[int, int]], list[tuple[int, ...]]]:
        """Token ranges [start, end) and token ids of the words of the content (special positions excluded)."""
        content = np.flatnonzero(~example.special)
        if not len(content):
            return [], []
        starts = example.word_starts[content] | (np.diff(content, prepend=-2) != 1)
        bounds = np.append(content[starts], content[-1] + 1).tolist()
        ids = example.input_ids.tolist()
        ranges = list(pairwise(bounds))
        return ranges, [tuple(ids[a:b]) for a, b in ranges]

    def word_kind(self, word: tuple[int, ...]) -> str:
        """"content", "suffix" (`+x`), "sentence-end", or "function" (stopword, `x+` clitic, punctuation, special)."""
        kind = self.kinds.get(word)
        if kind is None:
            if len(self.kinds) >= KIND_CACHE_SIZE:
                self.kinds.clear()
            kind = self.kinds[word] = self.classify(word)
        return kind

    def classify(self, word: tuple[int, ...]) -> str:
        if any(t in self.special_ids for t in word):
            return "function"
        text = "".join(self.piece_text[t] for t in word)
        if text and all(c in SENTENCE_END for c in text):
            return "sentence-end"
        if text.startswith("+") and len(text) > 1:
            return "suffix"
        if (text in STOPWORDS or text.endswith("+") or text.startswith("[")
                or not any(unicodedata.category(c)[0] in "LN" for c in text)):
            return "function"
        return "content"

    def recurring_spans(self, words: list[tuple[int, int]], keys: list[tuple], kinds: list[str]) -> list[list]:
        """Clusters of non-overlapping occurrences (word ranges [first, end)) of the same valid span, maximal spans
        only.

        A span is n consecutive words of at most MAX_SPAN_TOKENS tokens, starting with a content word and ending with a
        content word or a suffix. A cluster is dropped when extending all its occurrences by one word to the left or
        the right gives the same valid span each time (the longer span is the better answer).
        """
        counts = Counter(keys)
        occurrences: dict[tuple, list[int]] = defaultdict(list)
        for first in range(len(words)):
            if kinds[first] != "content" or counts[keys[first]] < 2:
                continue
            key: tuple = ()
            for last in range(first, len(words)):
                # A span holding a word seen once in the passage cannot recur.
                if (counts[keys[last]] < 2 or kinds[last] == "sentence-end"
                        or words[last][1] - words[first][0] > MAX_SPAN_TOKENS):
                    break
                key = key + (keys[last],)
                if kinds[last] in ("content", "suffix"):
                    found = occurrences[key]
                    if not found or found[-1] + len(key) <= first:
                        found.append(first)

        def same_neighbour(indices: list[int]) -> tuple | None:
            if all(0 <= i < len(words) for i in indices) and len({keys[i] for i in indices}) == 1:
                return keys[indices[0]]
            return None

        clusters = []
        for key, starts in occurrences.items():
            if len(starts) < 2:
                continue
            n = len(key)
            right, left = same_neighbour([s + n for s in starts]), same_neighbour([s - 1 for s in starts])
            if right is not None and len(occurrences.get(key + (right,), ())) == len(starts):
                continue
            if left is not None and len(occurrences.get((left,) + key, ())) == len(starts):
                continue
            clusters.append([(s, s + n) for s in starts])
        return clusters

    # ------------------------------------------------------------------------------------------- examples

    def example(self, example: Example, rng: np.random.Generator) -> SpanExample:
        ids = example.input_ids
        words, keys = self.words(example)
        if not words:
            return self.assemble([self.specials.mask], [], None)
        kinds = [self.word_kind(key) for key in keys]
        clusters = self.recurring_spans(words, keys, kinds)
        if clusters:
            cluster = clusters[int(rng.integers(len(clusters)))]
            kept = int(rng.integers(len(cluster)))
            others = [i for i in range(len(cluster)) if i != kept]
            anchor = others[int(rng.integers(len(others)))]
            occurrence_words = cluster
        else:
            content = [i for i, kind in enumerate(kinds) if kind == "content"] or list(range(len(words)))
            blank = content[int(rng.integers(len(content)))]
            occurrence_words, kept, anchor = [(blank, blank + 1)], None, 0
        # Token ranges of the occurrences.
        spans = [(words[a][0], words[b - 1][1]) for a, b in occurrence_words]
        window = self.question_window(words, kinds, occurrence_words, anchor)
        w0, w1 = words[window[0]][0], words[window[1] - 1][1]
        a0, a1 = spans[anchor]
        question = [*ids[w0:a0].tolist(), self.specials.mask, *ids[a1:w1].tolist()]
        # The passage: the content minus the question's sentence, the other occurrences → the question token.
        hidden = {spans[i][0]: spans[i][1] for i in range(len(spans)) if i not in (kept, anchor)}
        passage: list[int] = []
        answer = None
        position, end = words[0][0], words[-1][1]
        while position < end:
            if w0 <= position < w1 or example.special[position]:
                position += 1
            elif position in hidden:
                passage.append(self.specials.mask)
                position = hidden[position]
            else:
                if kept is not None and position == spans[kept][0]:
                    answer = (len(passage), len(passage) + spans[kept][1] - spans[kept][0] - 1)
                passage.append(int(ids[position]))
                position += 1
        return self.assemble(question, passage, answer)

    def question_window(self, words, kinds, occurrences, anchor: int) -> tuple[int, int]:
        """Word range [first, end) around occurrence `anchor`: its sentence, clipped to the question budget and to
        the neighbouring occurrences."""
        a, b = occurrences[anchor]
        low = max((e for s, e in occurrences if e <= a), default=0)
        high = min((s for s, e in occurrences if s >= b), default=len(words))
        budget = self.question_budget - 1  # the blank is one token whatever the span's length
        first, end, used = a, b, 0
        grow_left = grow_right = True
        while grow_left or grow_right:
            if grow_left:
                i = first - 1
                size = words[i][1] - words[i][0] if i >= low else 0
                if i < low or kinds[i] == "sentence-end" or used + size > budget:
                    grow_left = False
                else:
                    first, used = i, used + size
            if grow_right:
                i = end
                size = words[i][1] - words[i][0] if i < high else 0
                if i >= high or used + size > budget:
                    grow_right = False
                else:
                    end, used = i + 1, used + size
                    if kinds[i] == "sentence-end":
                        grow_right = False
        return first, end

    def assemble(self, question: list[int], passage: list[int], answer: tuple[int, int] | None) -> SpanExample:
        """[CLS] question [SEP] passage [SEP], trimming the passage away from the answer if it is too long."""
        s = self.specials
        excess = len(question) + len(passage) + 3 - self.max_seq_length
        if excess > 0:
            if answer is None or answer[1] < len(passage) - excess:
                passage = passage[: len(passage) - excess]
            else:
                passage = passage[excess:]
                answer = (answer[0] - excess, answer[1] - excess)
                if answer[0] < 0:  # the answer does not fit: keep the example, unanswerable
                    answer = None
        offset = len(question) + 2
        input_ids = [s.cls, *question, s.sep, *passage, s.sep]
        types = [0] * offset + [1] * (len(passage) + 1)
        target = (0, 0) if answer is None else (answer[0] + offset, answer[1] + offset)
        return SpanExample(input_ids, types, target)


class SpanSelection(nn.Module):
    """A question-answering model trained on span-selection examples; `export` writes it as it is."""

    def __init__(self, model, collator: SpanSelectionCollator):
        super().__init__()
        self.model = model
        self.collator = collator

    def forward(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        out = self.model(
            input_ids=batch["input_ids"], attention_mask=batch.get("attention_mask"),
            token_type_ids=batch.get("token_type_ids"),
            start_positions=batch["start_positions"], end_positions=batch["end_positions"],
        )
        with torch.no_grad():
            scored = batch["start_positions"] < batch["input_ids"].size(1)  # not a padding row
            starts, ends = batch["start_positions"][scored], batch["end_positions"][scored]
            start_hit = out.start_logits[scored].argmax(-1) == starts
            end_hit = out.end_logits[scored].argmax(-1) == ends
            metrics = {
                "span_loss": out.loss.detach(),
                "span_exact": (start_hit & end_hit).float().mean(),
                "start_accuracy": start_hit.float().mean(),
                "end_accuracy": end_hit.float().mean(),
                "answerable": (starts > 0).float().mean(),
                "weight": torch.full((), float(len(starts)), device=starts.device),
            }
        return {"loss": out.loss, **metrics}

    def export(self, directory) -> None:
        self.model.save_pretrained(directory)


def build(config, tokenizer) -> SpanSelection:
    from transformers import (
        AutoConfig,
        AutoModelForQuestionAnswering,
        BertConfig,
        BertForQuestionAnswering,
        DebertaV2ForQuestionAnswering,
    )

    if config.nsp:
        raise ConfigError("--nsp is an mlm option; span-selection builds its own question/passage pairs")
    specials = SpecialIds.from_tokenizer(tokenizer)
    if config.init_from:
        directory = init_model_dir(config.init_from)
        stored = AutoConfig.from_pretrained(directory)
        check_init_from(config, stored, directory, tokenizer)
        try:
            # DeBERTa's disentangled attention has no SDPA kernel.
            attention = {} if config.architecture == "deberta-v2" else {"attn_implementation": "sdpa"}
            model = from_pretrained(AutoModelForQuestionAnswering, directory, **attention)
        except ValueError as exc:  # a model type without a QA head in transformers
            raise ConfigError(f"--init-from {directory}: no question-answering model for it ({exc})") from exc
    elif config.architecture == "deberta-v2":
        from .deberta import deberta_config

        model = DebertaV2ForQuestionAnswering._from_config(deberta_config(len(tokenizer), specials.pad,
                                                                          config.model_size))
    else:
        bert_config = BertConfig(vocab_size=len(tokenizer), pad_token_id=specials.pad,
                                 **bert_config_kwargs(config.model_size))
        model = BertForQuestionAnswering._from_config(bert_config, attn_implementation="sdpa")
    model.train()
    return SpanSelection(model, SpanSelectionCollator(tokenizer, specials, config.max_seq_length,
                                                      BatchShape.for_config(config)))
