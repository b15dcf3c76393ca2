"""The one place where the QA stage treats an encoder architecture differently; fine-tuning (finetune.py) and
inference (infer.QAModel.load, hence `Pipeline(..., backend="torch")`) both go through `prepare_qa_model`.

BERT, ELECTRA and DeBERTa need nothing here. XLNet (pretrain/xlnet.py; `AutoModelForQuestionAnswering` gives
`XLNetForQuestionAnsweringSimple`, a start/end head like BERT's):

- Windows keep the project's layout, [CLS] question [SEP] context [SEP] padded on the right with an attention mask,
  not XLNet's own (question <sep> context <sep> <cls>, padded on the left). XLNet's positions are relative, so right
  padding changes no distance between real tokens and the masked padding is never read; the [CLS] a no-answer window
  points at is found wherever it stands (features.label_windows), and a model pretrained here saw [CLS] first.
- token_type_ids are what XLNet calls segment ids. XLNet only asks whether two tokens share a segment (a learned
  bias per head), so BERT's 0 (question, with [CLS]) and 1 (context) are its two segments as they are. The
  question-overlap type 2 (features.QUESTION_OVERLAP_TYPE) cannot mean "a context word the question also has" to it:
  it would make those words a third segment, apart from the rest of the context. That combination is refused.
- No position table: config.json has no max_position_embeddings, so a window is bounded only by the settings' own
  limit (infer.QASettings gets no model limit).
- No memory: segment recurrence carries states to a next segment of the same text, which windows are not, so
  `use_mems_eval` is turned off (XLNet's default keeps every layer's states after each forward, for nothing).
"""
from __future__ import annotations

from ...errors import ConfigError


def prepare_qa_model(model, *, question_overlap: bool, source: object) -> None:
    """Refuse what `model`'s architecture cannot do and set what it needs, before it is trained or run."""
    if model.config.model_type != "xlnet":
        return
    if question_overlap:
        raise ConfigError(f"{source}: an XLNet model cannot take the question-overlap token type: XLNet only "
                          "compares segment ids (same segment or not), so type 2 would split the context into two "
                          "segments; fine-tune it without --question-overlap")
    model.config.use_mems_eval = False
