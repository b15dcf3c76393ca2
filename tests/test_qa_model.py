"""QA windows, n-best decoding, fine-tuning, resume and inference with a tiny random BERT (L2/H64)."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from arabert_pipeline.errors import ConfigError, InputError
from arabert_pipeline.qa.align import QAPreprocessing, align_examples
from arabert_pipeline.qa.data import read_squad
from arabert_pipeline.qa.transformer import finetune as finetune_module
from arabert_pipeline.qa.transformer.decode import (
    TRIMMED_PUNCTUATION,
    decode_spans,
    is_word_character,
    snap_spans_to_words,
    trim_spans,
)
from arabert_pipeline.qa.transformer.features import build_windows
from arabert_pipeline.qa.transformer.finetune import FinetuneConfig, run_finetune
from arabert_pipeline.qa.transformer.model import QAModel
from data_slices import write_first_articles

torch = pytest.importorskip("torch")
SMALL = dict(max_seq_length=128, doc_stride=32, batch_size=16, lr=1e-3, progress=False, skip_misaligned=True)


@pytest.fixture(scope="session")
def tiny_qa(tiny_mlm, qa_slices, tmp_path_factory):
    """The tiny MLM fine-tuned for 2 epochs on 54 ARCD-train questions (and evaluated on 27 ARCD-test ones)."""
    train, test = qa_slices
    output = tmp_path_factory.mktemp("tiny-qa") / "model"
    config = FinetuneConfig(model=str(tiny_mlm), output=str(output), train=[str(train)], eval=[str(test)],
                            epochs=2, **SMALL)
    return output, run_finetune(config, log=lambda message: None)


def test_every_file_of_a_finetuned_model_follows_the_umask(tiny_qa):
    """safetensors writes its files 0600 (model.safetensors, checkpoints/best.safetensors); the files beside them follow
    the umask, and weights are no more secret than they are (issue 37)."""
    import os

    output, _ = tiny_qa
    mask = os.umask(0)
    os.umask(mask)
    modes = {p.relative_to(output).as_posix(): oct(p.stat().st_mode & 0o777) for p in output.rglob("*") if p.is_file()}
    assert "model.safetensors" in modes and modes == dict.fromkeys(modes, oct(0o666 & ~mask))


# Windows ----------------------------------------------------------------------------------------------------------

def test_window_labels_cover_exactly_the_answer(tiny_mlm):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_mlm)
    aligned, report = align_examples(read_squad("arcd-test", misaligned="skip").examples[:150], QAPreprocessing("none"))
    spans = [a["spans"][0] for a in aligned]
    windows = build_windows(tokenizer, [a["question"] for a in aligned], [a["aligned"].text for a in aligned],
                            max_seq_length=128, doc_stride=32, answer_spans=spans)
    assert len(windows) > len(aligned)  # long contexts were split
    exact = labelled = 0
    for w in range(len(windows)):
        e, start, end = windows.example_index[w], windows.start_positions[w], windows.end_positions[w]
        context, (a, b) = aligned[e]["aligned"].text, spans[e]
        in_window = windows.offsets[w][windows.offsets[w, :, 0] >= 0]
        if start == 0:  # CLS: the answer is not entirely inside this window
            assert end == 0 and not (in_window[0, 0] <= a and b <= in_window[-1, 1])
            continue
        labelled += 1
        covered = context[windows.offsets[w, start, 0] : windows.offsets[w, end, 1]]
        assert context[a:b] in covered  # whole tokens: an answer starting inside a word keeps its first token
        exact += covered == context[a:b]
        decoded = tokenizer.decode(windows.input_ids[w][start : end + 1]).replace(" ##", "").replace(" ", "")
        assert context[a:b].replace(" ", "") in decoded or tokenizer.unk_token in decoded
    assert labelled >= len(aligned) and exact / labelled > 0.97


def test_long_questions_are_cut_not_fatal(tiny_mlm):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_mlm)
    windows = build_windows(tokenizer, ["ما " * 300], ["كان أحمد شوقي شاعرا مصريا. " * 40],
                            max_seq_length=128, doc_stride=32, max_question_tokens=64)
    assert len(windows) > 1
    assert all((windows.offsets[w, :, 0] >= 0).sum() >= 128 - 64 - 3 - 32 for w in range(len(windows) - 1))
    with pytest.raises(ConfigError, match="doc_stride"):
        build_windows(tokenizer, ["ما"], ["نص"], max_seq_length=64, doc_stride=64)


# N-best decoding ------------------------------------------------------------------------------------------------

def _offsets(windows: int, tokens: int, context_from: int):
    offsets = np.full((windows, tokens, 2), -1)
    for t in range(context_from, tokens - 1):
        offsets[:, t] = (10 * t, 10 * t + 5)
    return offsets


def test_decode_picks_the_planted_span_and_drops_invalid_ones():
    start, end = np.full((5, 40), -100.0), np.full((5, 40), -100.0)  # planted logits pair only with each other
    offsets = _offsets(5, 40, context_from=5)  # every window covers the same characters, for simplicity
    start[0, 2], end[0, 3] = 100, 100  # question tokens: outside the context
    start[1, 30], end[1, 20] = 50, 50  # reversed
    start[2, 6], end[2, 38] = 40, 40  # 33 tokens: too long
    start[3, 9], end[3, 12] = 8, 7  # the planted answer
    start[4, 9], end[4, 12] = 6, 6  # the same span seen again in another window: lower score, merged
    spans = decode_spans(start, end, offsets, np.zeros(5, dtype=int), n_examples=1, max_answer_tokens=30)[0]
    assert spans[0] == (90, 125, 15.0)
    assert len({(s, e) for s, e, _ in spans}) == len(spans) == 20  # distinct spans, `limit` of them
    assert all(s < e <= s + 30 * 10 and s >= 50 for s, e, _ in spans)
    assert all(score < -40 for _, _, score in spans[1:])


def test_decode_keeps_examples_apart():
    start, end = np.zeros((2, 20)), np.zeros((2, 20))
    start[0, 6], end[0, 7], start[1, 10], end[1, 10] = 5, 5, 9, 9
    spans = decode_spans(start, end, _offsets(2, 20, 5), np.array([0, 1]), n_examples=2, limit=1)
    assert spans == [[(60, 75, 10.0)], [(100, 105, 18.0)]]


# Fine-tuning, inference, resume ------------------------------------------------------------------------------------

def test_finetune_then_predict_spans_of_the_original_context(tiny_qa, qa_slices):
    from transformers import AutoModelForQuestionAnswering

    output, result = tiny_qa
    assert result.train_questions == 54 and result.steps == 2 * -(-result.train_windows // 16)
    AutoModelForQuestionAnswering.from_pretrained(output)  # a plain HF QA model dir
    metadata = json.loads((output / "arabert_pipeline.json").read_text(encoding="utf-8"))
    assert metadata["preprocessing"] == "none" and metadata["max_seq_length"] == 128
    assert metadata["doc_stride"] == 32 and metadata["max_answer_tokens"] == 30
    assert metadata["finetune"]["seed"] == 42 and metadata["alignment"]["rate"] == 1.0
    assert metadata["training_data"][0]["questions"] == 54
    assert not (output / "checkpoints").exists()

    examples = read_squad(qa_slices[1], misaligned="keep").examples
    predictions = json.loads(result.predictions[str(qa_slices[1])].read_text(encoding="utf-8"))
    assert set(predictions) == {e["id"] for e in examples}
    assert set(result.metrics[str(qa_slices[1])]) >= {"soqal_f1", "arabic_f1", "soqal_sm"}

    model = QAModel.load(output)
    answers = model.predict(examples, batch_size=8, top_k=3)
    assert [len(a) for a in answers] == [3] * len(examples)
    for example, found in zip(examples, answers, strict=True):
        assert all(a.text == example["context"][a.start : a.end] and a.text.strip() == a.text for a in found)
        assert found[0].score >= found[1].score >= found[2].score
        assert all(0 < a.score <= 1 for a in found) and sum(a.score for a in found) <= 1 + 1e-9  # probabilities
    top_1 = model.predict(examples, batch_size=8)  # the same probability whatever top_k asks for
    assert [found[0] for found in top_1] == [found[0] for found in answers]
    # The predictions file is evaluate's format: the start offsets locate each answer in its context.
    contexts = {e["id"]: e["context"] for e in examples}
    assert all(contexts[qid][a["start"] : a["start"] + len(a["text"])] == a["text"] for qid, a in predictions.items())


def test_predict_rejects_empty_input_and_models_without_qa_head_or_preprocessing(tiny_qa, tiny_mlm, tmp_path):
    output, _ = tiny_qa
    model = QAModel.load(output)
    with pytest.raises(ValueError, match="empty or missing question"):
        model.predict([{"question": "  ", "context": "نص"}])
    with pytest.raises(InputError, match="example 1: the context yields no tokens"):
        model.predict([{"question": "من؟", "context": "نص"}, {"question": "من؟", "context": "\u200f"}])
    with pytest.raises(ConfigError, match="no trained question-answering head"):
        QAModel.load(tiny_mlm)
    bare = tmp_path / "bare"
    shutil.copytree(output, bare, ignore=shutil.ignore_patterns("arabert_pipeline.json", "eval"))
    with pytest.raises(ConfigError, match="pass it explicitly"):
        QAModel.load(bare)
    # Without stored settings: the default window (384), capped at the model's positions (256 here).
    assert QAModel.load(bare, preprocessing="none").settings.max_seq_length == 256
    with pytest.raises(ConfigError, match="trained with preprocessing 'none'"):
        QAModel.load(output, preprocessing="arabertv02")


@pytest.mark.parametrize("preprocessing", ["arabertv02", "arabertv2"])
def test_answers_come_from_the_original_context_through_preprocessing(tiny_qa, preprocessing, tmp_path):
    from test_pipeline import PLANTED_WRITTEN, build_model

    output, _ = tiny_qa
    loaded = QAModel.load(output)
    model = QAModel(loaded.model, loaded.tokenizer, preprocessing, loaded.settings)
    sentence = ("وُلِدَ نجيبُ محفوظ في القاهرة عامَ ١٩١١ (انظر http://example.org/naguib)، وحصلَ على جائزةِ نوبل "
                "للآدابِ عام 1988… وكتبَ «الثلاثية» والكرنك ")
    context = sentence * 6
    # The tiny model's spans are sliced from the context whatever the offsets: a planted model's known answer, in
    # the fourth sentence after the URL, diacritics and tatweel, shows the offset map right.
    planted = QAModel.load(build_model(tmp_path / "planted", preprocessing, planted=True, max_seq_length=96,
                                       doc_stride=32))
    noisy = sentence.replace("جائزةِ نوبل", f"جائزةِ {PLANTED_WRITTEN}")
    start = 3 * len(sentence) + noisy.index(PLANTED_WRITTEN)
    answer = planted.predict([{"question": "متى وُلِد نجيب محفوظ؟", "context": sentence * 3 + noisy + sentence * 2}])
    assert (answer[0][0].text, answer[0][0].start) == (PLANTED_WRITTEN, start)
    answers = model.predict([{"question": "متى وُلِد نجيب محفوظ؟", "context": context}], top_k=20)[0]
    # Up to 20: candidates that differ only by punctuation at their ends are one answer.
    assert 10 <= len(answers) <= 20 and len({(a.start, a.end) for a in answers}) == len(answers)
    for answer in answers:
        assert answer.text == context[answer.start : answer.end] and answer.text == answer.text.strip()
        assert snap(context, answer.start, answer.end) == (answer.start, answer.end), "a word was cut"
        assert answer.text[0] not in TRIMMED_PUNCTUATION and answer.text[-1] not in TRIMMED_PUNCTUATION, answer.text
        assert any(map(is_word_character, answer.text)), answer.text


def test_trimmed_answers_merge_their_probabilities_and_keep_the_decoders_order():
    from arabert_pipeline.qa.transformer.decode import Answer, trimmed

    context = "تقع البتراء في جنوب الأردن، وهي مدينة أثرية. «»"
    south = context.index("جنوب")
    comma = context.index("،") + 1
    answers = [Answer(context[south:comma], south, comma, 0.3),  # "جنوب الأردن،"
               Answer("وهي مدينة", context.index("وهي"), context.index("وهي") + 9, 0.4),
               Answer(context[south:comma - 1], south, comma - 1, 0.2),  # "جنوب الأردن": the first one trimmed
               Answer("«»", len(context) - 2, len(context), 0.1)]  # punctuation alone: dropped
    by_rank = trimmed(context, answers, by_score=False)
    assert [(a.text, round(a.score, 6)) for a in by_rank] == [("جنوب الأردن", 0.5), ("وهي مدينة", 0.4)]
    assert [a.text for a in trimmed(context, answers, by_score=True)] == ["جنوب الأردن", "وهي مدينة"]
    assert all(a.text == context[a.start:a.end] for a in by_rank)


def test_a_leading_word_of_the_setting_is_dropped_only_before_another_word():
    from arabert_pipeline.qa.transformer.decode import Answer, trimmed

    context = "بُني البرج عامَ 1889 في باريس، وفي عام واحد زاره الملايين. في"
    words = frozenset({"عام", "في"})

    def answer(text: str, score: float, nth: int = 0) -> Answer:
        start = context.index(text) if nth == 0 else context.index(text, context.index(text) + 1)
        return Answer(text, start, start + len(text), score)

    answers = [answer("عامَ 1889", 0.5),  # diacritics do not hide the word
               answer("1889", 0.2),  # the first answer once its word is dropped: they merge
               answer("في باريس،", 0.1),  # punctuation trimmed, then the word dropped
               answer("وفي عام", 0.1),  # a clitic makes another word
               answer("في", 0.05, nth=1)]  # a word alone stays
    found = trimmed(context, answers, by_score=False, leading_words=words)
    assert [(a.text, round(a.score, 6)) for a in found] == [("1889", 0.7), ("باريس", 0.1), ("وفي عام", 0.1),
                                                            ("في", 0.05)]
    assert all(a.text == context[a.start:a.end] for a in found)
    assert [a.text for a in trimmed(context, answers, by_score=False)][:2] == ["عامَ 1889", "1889"]


def test_leading_words_are_checked_where_they_are_read(tmp_path):
    from arabert_pipeline.qa.transformer.settings import QASettings

    assert QASettings.from_metadata({"leading_words": ["عام", "في"]}).leading_words == ("عام", "في")
    for bad in (["عامٌ"], ["سنة"], ["في باريس"], [""], "في", [3]):
        with pytest.raises(ConfigError, match="leading_words"):
            QASettings.from_metadata({"leading_words": bad}, source=tmp_path / "arabert_pipeline.json")


def test_trimmed_spans_lose_edge_punctuation_only():
    text = "في جنوب الأردن، «مصرع كليوباترا» ، 3.5 . بلغت 13%؛ عام 1037م (429 هـ)."
    cases = {"جنوب الأردن،": "جنوب الأردن", "«مصرع كليوباترا» ": "«مصرع كليوباترا»", "3.5 .": "3.5",
             " ، ": " ، ", "الأردن، «مصرع": "الأردن، «مصرع", "13%؛": "13%", "(429 هـ).": "(429 هـ)"}
    starts = np.asarray([text.index(k) for k in cases])
    ends = starts + np.asarray([len(k) for k in cases])
    new_starts, new_ends = trim_spans(text, starts, ends)
    assert [text[a:b] for a, b in zip(new_starts, new_ends, strict=True)] == list(cases.values())


def snap(text: str, start: int, end: int) -> tuple[int, int]:
    """One span [start, end) of `text`, widened as snap_spans_to_words widens many."""
    starts, ends = snap_spans_to_words(text, np.asarray([start]), np.asarray([end]))
    return int(starts[0]), int(ends[0])


def test_snapping_widens_cut_words_only():
    text = "وَالكتابُ، في 1988م (القاهرة)"
    word = text.index("الكتابُ")
    assert snap(text, word, word + 3) == (0, word + len("الكتابُ"))  # diacritics are part of the word
    assert snap(text, 0, len("وَالكتابُ")) == (0, len("وَالكتابُ"))  # whole words stay as they are
    year = text.index("1988")
    assert snap(text, year + 1, year + 3) == (year, year + 5)  # digits and the glued م
    paren = text.index("(")
    assert snap(text, paren, paren + 4) == (paren, text.index(")"))  # punctuation is a boundary
    assert snap(text, len(text) - 1, len(text)) == (len(text) - 1, len(text))


def widened(text: str, start: int, end: int) -> str:
    first, last = snap(text, start, end)
    return text[first:last]


def test_snapping_keeps_numbers_whole():
    text = "موت 7.6 مليون شخص، و1,000 آخرين، و٧٫٥ مليون. ثم 3. بعد"
    six = text.index("6 مليون")
    assert widened(text, six, six + 1) == "7.6"  # the decimal point does not cut the number
    thousand = text.index("000")
    assert widened(text, thousand, thousand + 3) == "و1,000"
    arabic = text.index("٥")
    assert widened(text, arabic, arabic + 1) == "و٧٫٥"
    three = text.index("3.")
    assert snap(text, three, three + 1) == (three, three + 1)  # a full stop after a number still ends it
    comma = text.index("شخص،")
    assert widened(text, comma, comma + 2) == "شخص"  # a comma between words is no number


def interrupt_at_step_4(monkeypatch):
    """What Ctrl-C does at step 4: the engine finishes the step, keeps its checkpoint and returns."""
    after_step = finetune_module.QATrainer.after_step

    def then_stop(trainer, board):
        stop = after_step(trainer, board)
        if trainer.state.step == 4:
            trainer.request_stop()
        return stop

    monkeypatch.setattr(finetune_module.QATrainer, "after_step", then_stop)


@pytest.mark.slow
def test_resume_after_interruption_gives_the_same_model(tiny_qa, tiny_mlm, qa_slices, tmp_path, monkeypatch):
    from safetensors.torch import load_file

    reference, _ = tiny_qa
    train, _ = qa_slices
    config = FinetuneConfig(model=str(tiny_mlm), output=str(tmp_path / "model"), train=[str(train)], epochs=2,
                            save_steps=4, **SMALL)  # no eval set: the weights are what is compared
    interrupt_at_step_4(monkeypatch)
    assert not run_finetune(config, log=lambda message: None).completed
    assert [p.name for p in (tmp_path / "model" / "checkpoints").iterdir()] == ["step-00000004"]
    monkeypatch.undo()
    with pytest.raises(ConfigError, match="--resume"):
        run_finetune(config, log=lambda message: None)
    with pytest.raises(ConfigError, match="other settings.*lr"):
        run_finetune(FinetuneConfig(**{**vars(config), "lr": 1e-4, "resume": "latest"}), log=lambda message: None)
    messages = []
    run_finetune(FinetuneConfig(**{**vars(config), "resume": True}), log=messages.append)
    assert any("resumed from" in m and "step 4/" in m for m in messages)
    resumed, expected = load_file(tmp_path / "model" / "model.safetensors"), load_file(reference / "model.safetensors")
    assert resumed.keys() == expected.keys()
    assert all(torch.equal(resumed[k], expected[k]) for k in expected)


@pytest.mark.slow  # inductor compiles the training step: about a minute in all on one CPU thread, cache cold
def test_compiled_finetune_trains_like_eager_resumes_and_writes_the_plain_models_keys(tiny_mlm, qa_slices, tmp_path,
                                                                                      monkeypatch):
    """finetune --compile on the CPU (inductor's C++ backend): an interrupted compiled run, resumed compiled, logs the
    eager run's losses step for step, and everything it writes is the bare module's (no `_orig_mod.` of the compiled
    wrapper): the checkpoint's state.pt and model dir, the best epoch's weights, the model dir, the eval predictions,
    and an ONNX export that answers as the torch backend does."""
    import torch._inductor.config as inductor_config
    from safetensors.torch import load_file
    from torch._dynamo.utils import counters

    from arabert_pipeline import Pipeline
    from arabert_pipeline.artifacts.metadata import read_metadata
    from arabert_pipeline.qa.transformer import config as qa_config
    from arabert_pipeline.qa.transformer.export import export_onnx
    from test_pretrain import read_log

    torch.set_num_threads(1)
    # Dropout through eager's kernels, so that both runs draw the same masks from the same generator.
    monkeypatch.setattr(inductor_config, "fallback_random", True)
    monkeypatch.setattr(qa_config, "LOG_EVERY", 1)  # a loss per step to compare
    train = write_first_articles("arcd-train", tmp_path / "train1.json", 1)  # 12 windows
    _, test = qa_slices
    # One batch of all 12 windows an epoch: one shape, one compilation; each epoch ends in a dev score.
    settings = dict(model=str(tiny_mlm), train=[str(train)], dev=[str(test)], eval=[str(test)], epochs=6,
                    bf16="off", **{**SMALL, "batch_size": 12})
    eager, compiled = tmp_path / "eager", tmp_path / "compiled"
    run_finetune(FinetuneConfig(output=str(eager), **settings), log=lambda message: None)
    config = FinetuneConfig(output=str(compiled), compile=True, **settings)
    counters.clear()
    with pytest.MonkeyPatch.context() as patch:
        interrupt_at_step_4(patch)
        assert not run_finetune(config, log=lambda message: None).completed
    assert counters["stats"]["unique_graphs"] >= 1, "nothing was compiled"

    plain = set(load_file(eager / "model.safetensors"))
    assert plain and not any("_orig_mod" in key for key in plain)
    checkpoint = compiled / "checkpoints" / "step-00000004"
    assert set(load_file(checkpoint / "model" / "model.safetensors")) == plain
    state = torch.load(checkpoint / "state.pt", weights_only=True)["model"]
    best = load_file(compiled / "checkpoints" / "best.safetensors")
    assert set(best) == set(state) and not any("_orig_mod" in key for key in state)

    assert run_finetune(FinetuneConfig(**{**vars(config), "resume": "latest"}), log=lambda message: None).completed
    losses = lambda run: [r["loss"] for r in read_log(run) if "loss" in r]  # noqa: E731  a one-line local helper
    assert len(losses(compiled)) == 6 and losses(compiled) == pytest.approx(losses(eager), abs=1e-4)
    ours, theirs = read_metadata(compiled)["finetune"], read_metadata(eager)["finetune"]
    assert ours["epoch"] == theirs["epoch"] and ours["dev_scores"] == pytest.approx(theirs["dev_scores"], abs=1e-6)
    a, b = load_file(compiled / "model.safetensors"), load_file(eager / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.allclose(a[k], b[k], atol=1e-4) for k in a)
    predictions = lambda run: json.loads((run / "eval" / "test3.predictions.json").read_text())  # noqa: E731  a one-line local helper
    assert predictions(compiled) == predictions(eager)

    export_onnx(compiled)
    onnx, torch_backend = Pipeline(compiled), Pipeline(compiled, backend="torch")
    assert onnx.backend == "onnx"
    question = read_squad(str(test), misaligned="keep").examples[0]
    found, expected = (p.answer(question["question"], question["context"], top_k=3) for p in (onnx, torch_backend))
    assert [(x.start, x.end) for x in found] == [(x.start, x.end) for x in expected]
    assert [x.score for x in found] == pytest.approx([x.score for x in expected], abs=1e-4)


class _RunsCode:
    """A pickle payload: unpickling it calls Path.touch on the marker file."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        from pathlib import Path

        return Path.touch, (Path(self.marker),)


@pytest.mark.slow
def test_resume_never_unpickles_code_and_names_broken_checkpoint_files(tiny_mlm, qa_slices, tmp_path, monkeypatch):
    train, _ = qa_slices
    config = FinetuneConfig(model=str(tiny_mlm), output=str(tmp_path / "model"), train=[str(train)], epochs=2,
                            save_steps=4, **SMALL)
    interrupt_at_step_4(monkeypatch)
    assert not run_finetune(config, log=lambda message: None).completed
    monkeypatch.undo()
    checkpoint = tmp_path / "model" / "checkpoints" / "step-00000004"
    resume = FinetuneConfig(**{**vars(config), "resume": "latest"})
    state = checkpoint / "state.pt"
    original = state.read_bytes()
    marker = tmp_path / "code-ran"
    torch.save({"optimizer": _RunsCode(marker)}, state)
    with pytest.raises(InputError, match="state.pt: not a plain tensor checkpoint"):
        run_finetune(resume, log=lambda message: None)
    assert not marker.exists()
    state.write_bytes(original[:100])
    with pytest.raises(InputError, match="state.pt: unreadable checkpoint state"):
        run_finetune(resume, log=lambda message: None)
    state.write_bytes(original)

    stored = checkpoint / "trainer_state.json"
    fingerprint = stored.read_text(encoding="utf-8")
    stored.write_text("{not json", encoding="utf-8")
    with pytest.raises(InputError, match="trainer_state.json: invalid JSON"):
        run_finetune(resume, log=lambda message: None)
    stored.write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(InputError, match="trainer_state.json: expected a JSON object, found list"):
        run_finetune(resume, log=lambda message: None)
    stored.unlink()  # a checkpoint without its trainer state is no checkpoint
    with pytest.raises(ConfigError, match="holds no checkpoint to resume"):
        run_finetune(resume, log=lambda message: None)
    stored.write_text(fingerprint, encoding="utf-8")
    messages = []
    run_finetune(resume, log=messages.append)
    assert any("resumed from" in m for m in messages)


def test_leaking_training_data_is_refused_before_training(tiny_mlm, qa_slices, tmp_path):
    train, test = qa_slices
    config = FinetuneConfig(model=str(tiny_mlm), output=str(tmp_path / "m"), train=[str(train), str(test)],
                            eval=[str(test)], **SMALL)
    with pytest.raises(ConfigError, match=r"overlap:\n.*test3\.json -> .*test3\.json: \d+ shared context"):
        run_finetune(config, log=lambda message: None)
    assert not (tmp_path / "m").exists()


def test_protocols_and_cli_defaults(shared_data, monkeypatch, tmp_path, capsys):
    import argparse
    import dataclasses

    from arabert_pipeline.cli import main
    from arabert_pipeline.qa.transformer import cli

    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    args = parser.parse_args(["finetune", "--model", "m", "-o", "out", "--protocol", "offline"])
    config = cli.config_from_args(args)
    defaults = FinetuneConfig(model="m", output="out", protocol="offline")
    assert config == defaults and dataclasses.asdict(config)["lr"] == 3e-5
    resolved = config.resolved()
    assert resolved.train == ["arcd-train", "xquad-ar", "mlqa-ar-dev"]
    assert resolved.eval == ["arcd-test", "tydiqa-goldp-ar-dev"]
    with pytest.raises(ConfigError, match="--protocol"):
        FinetuneConfig(model="m", output="o", protocol="paper", train=["arcd"]).resolved()
    monkeypatch.setenv("ARABERT_PIPELINE_DATA", str(tmp_path))
    argv = ["finetune", "--model", "m", "--preprocessing", "none", "-o", str(tmp_path / "o"), "--protocol", "paper"]
    assert main(argv) == 2
    assert "Arabic-SQuAD.json" in capsys.readouterr().err


@pytest.mark.slow
def test_two_processes_finetune(tiny_mlm, qa_slices, tmp_path):
    """The training engine's DDP (gloo on CPU, through torchrun) for fine-tuning: batches sharded by process, the dev
    score computed once (main process) and its early-stopping decision shared; the model is written once.
    (Resuming exactly is tested in one process above; the engine's DDP resume in test_pretrain.py.)"""
    import os
    import subprocess
    import sys
    from pathlib import Path

    train, dev = qa_slices
    out = tmp_path / "ddp"
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "-m", "arabert_pipeline.cli",
               "finetune", "--model", str(tiny_mlm), "-o", str(out), "--train", str(train), "--dev", str(dev),
               "--epochs", "3", "--patience", "1", "--batch-size", "8", "--max-seq-length", "128", "--doc-stride",
               "32", "--lr", "1e-3", "--skip-misaligned", "--save-steps", "3", "--sentence-prior", "0",
               "--within-sentence", "off", "--decoding", "max-score", "--no-progress"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    metadata = json.loads((out / "arabert_pipeline.json").read_text(encoding="utf-8"))["finetune"]
    assert metadata["processes"] == 2
    epochs = len(metadata["dev_scores"])
    per_epoch = -(-metadata["train_windows"] // 8) // 2  # each step reads one batch per process
    assert metadata["steps"] == epochs * per_epoch
    log = [json.loads(line) for line in (out / "log.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [row["epoch"] for row in log if "epoch" in row] == list(range(1, epochs + 1))
    assert sorted(p.name for p in out.iterdir() if p.name != "tensorboard") == sorted(
        ["arabert_pipeline.json", "config.json", "log.jsonl", "model.safetensors", "sentence_idf.json",
         "tokenizer.json", "tokenizer_config.json"])


def test_vectorized_span_mapping_equals_the_scalar_one():
    """The decoder maps candidate spans back in bulk (to_original_many, snap_spans_to_words): the same spans as one at
    a time, on preprocessed ARCD contexts (offsets through normalization) and on text with spaces and punctuation at
    the edges."""
    from arabert_pipeline.qa.align import AlignedText
    from arabert_pipeline.qa.transformer.decode import snap_spans_to_words

    rng = np.random.default_rng(0)
    contexts = [e["context"] for e in read_squad("arcd-test", misaligned="keep").examples[:40:4]]
    aligned = [QAPreprocessing("arabertv02").context(c) for c in contexts]
    odd = "  قال، (الوزير)  اليوم:   ١٢٣ م.  "
    index = np.arange(len(odd))
    aligned.append(AlignedText(odd, odd, index, index + 1))
    shuffled = AlignedText(odd, odd, rng.permutation(len(odd)), rng.permutation(len(odd)) + 1)  # not monotone
    aligned.append(shuffled)
    for text in aligned:
        n = len(text.text)
        starts = rng.integers(0, n - 1, 300)
        ends = np.minimum(n, starts + rng.integers(1, 40, 300))
        first, last = text.to_original_many(starts, ends)
        assert [source_span_by_steps(text, a, b) for a, b in zip(starts, ends, strict=True)] == list(
            zip(first.tolist(), last.tolist(), strict=True))
        original = len(text.original)
        a = rng.integers(0, original + 1, 300)
        b = np.minimum(original, a + rng.integers(0, 30, 300))
        snapped = snap_spans_to_words(text.original, a, b)
        assert [widen_by_steps(text.original, x, y) for x, y in zip(a, b, strict=True)] == list(
            zip(*(s.tolist() for s in snapped), strict=True))


def source_span_by_steps(aligned, start: int, end: int) -> tuple[int, int]:
    """The definition of mapping an output span back: the union of its characters' sources, edge spaces trimmed."""
    first, last = int(aligned.starts[start:end].min()), int(aligned.ends[start:end].max())
    while first < last and aligned.original[first].isspace():
        first += 1
    while last > first and aligned.original[last - 1].isspace():
        last -= 1
    return first, last


def widen_by_steps(text: str, start: int, end: int) -> tuple[int, int]:
    """The definition of snapping to words, one character at a time: the reference for the table-based version."""
    from arabert_pipeline.qa.transformer.decode import NUMBER_SEPARATORS, is_word_character

    def word(i: int) -> bool:  # a separator between two digits belongs to its number
        return is_word_character(text[i]) or (text[i] in NUMBER_SEPARATORS and 0 < i < len(text) - 1
                                              and text[i - 1].isdigit() and text[i + 1].isdigit())

    while 0 < start < len(text) and word(start - 1) and word(start):
        start -= 1
    while 0 < end < len(text) and word(end - 1) and word(end):
        end += 1
    return start, end
