"""`--architecture xlnet --objective plm` at tiny size: the permutation-LM collator's statistics on a fixed seed, the
model reading only what the factorisation order allows, option checks, and a run that stops, resumes and exports,
then fine-tunes for QA and answers through Pipeline."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from objective_corpus import DOCUMENTS, build_tiny, tiny_config, write_corpus_and_tokenizer  # noqa: E402  after the importorskip above
from test_pretrain import random_examples as pretrain_examples  # noqa: E402  after the importorskip above

K = 6


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    torch.set_num_threads(1)
    return write_corpus_and_tokenizer(tmp_path_factory.mktemp("xlnet"))


def config(setup, output="unused", **overrides):
    return tiny_config(setup, output, **{"objective": "plm", "architecture": "xlnet", **overrides})


def build(setup, **overrides):
    return build_tiny(setup, **{"objective": "plm", "architecture": "xlnet", **overrides})


def packed_examples(cfg, rows=5):
    """The first training sequences of the corpus, packed as the trainer packs them."""
    from transformers import AutoTokenizer

    from arabert_pipeline.pretrain.data import PretrainingData, SpecialIds, TokenStore, tokenize_corpus

    tokenizer = AutoTokenizer.from_pretrained(cfg.tokenizer)
    store = TokenStore.open(tokenize_corpus(cfg.corpus, tokenizer, Path(cfg.cache_dir), progress=False))
    data = PretrainingData(store, SpecialIds.from_tokenizer(tokenizer), cfg.max_seq_length, 10_000, 4, 0)
    return data.examples(data.train, np.arange(rows), np.random.default_rng(0))


def random_examples(rng, rows, max_length=126):
    """Sequences long enough for 1/K targets, whose words are runs of about 1.5 tokens."""
    return pretrain_examples(rng, rows, max_length=max_length, word_length=1.5, min_length=24)


def collator(**options):
    from arabert_pipeline.pretrain.data import SpecialIds
    from arabert_pipeline.pretrain.xlnet import PLMCollator

    return PLMCollator(SpecialIds(cls=2, sep=3, pad=0, mask=4), **options)


def targets_of(batch) -> np.ndarray:
    """(rows × width) bool: the positions target_mapping predicts."""
    return batch["target_mapping"].numpy().sum(axis=1) > 0


# ------------------------------------------------------------------------------------------------ the collator


def test_targets_are_one_in_k_of_the_tokens_in_whole_word_spans():
    examples = random_examples(np.random.default_rng(0), 300)
    batch = collator(bi_data=False)(examples, np.random.default_rng(1))
    targets = targets_of(batch)
    maskable = sum(len(e.input_ids) - 2 for e in examples)
    assert abs(targets.sum() / maskable - 1 / K) < 0.006
    runs, word_aligned, single = [], 0, 0
    for row, example in enumerate(examples):
        n = len(example.input_ids)
        chosen = targets[row, :n]
        assert not chosen[example.special].any(), "[CLS]/[SEP] are never predicted"
        goal = max(1, round((n - 2) / K))
        longest_word = np.diff(np.flatnonzero(example.word_starts)).max()
        assert goal <= chosen.sum() < goal + longest_word  # only a span's first word may overshoot
        # Runs of consecutive targets, and whether each starts and ends on word boundaries.
        edges = np.flatnonzero(np.diff(np.concatenate([[0], chosen.astype(int), [0]])))
        for start, end in zip(edges[::2], edges[1::2], strict=True):
            runs.append(end - start)
            word_aligned += bool(example.word_starts[start] and (end == n or example.word_starts[end]))
            single += end - start == 1 and not example.word_starts[start]
    runs = np.asarray(runs)
    # Spans of 1-5 words with P(n) ∝ 1/n: about 2.2 words of 1.5 tokens; single tokens chosen at random (the
    # top-up, or an unordered choice of the same count) would give runs of about 1.2.
    assert runs.mean() > 2.2 and (runs >= 4).mean() > 0.2
    assert word_aligned / len(runs) > 0.8 and single / len(runs) < 0.2


def test_perm_mask_follows_one_factorisation_order_per_sequence():
    examples = random_examples(np.random.default_rng(2), 7, max_length=40)
    batch = collator(bi_data=True)(examples, np.random.default_rng(3))
    perm, attention = batch["perm_mask"].numpy().astype(bool), batch["attention_mask"].numpy().astype(bool)
    targets = targets_of(batch)
    assert perm.shape[0] == 8, "bi_data: an even number of rows (forward and backward halves)"
    for row, example in enumerate(examples):
        n = len(example.input_ids)
        sees = ~perm[row, :n, :n]
        target = targets[row, :n]
        others = ~target
        # Non-targets see each other (both ways) and no target.
        assert sees[np.ix_(others, others)].all() and not sees[np.ix_(others, target)].any()
        # Each target sees every non-target, never itself, and the targets before it: the targets seen form a chain
        # 0, 1, ..., T-1 of nested sets, i.e. one order.
        positions = np.flatnonzero(target)
        assert sees[np.ix_(target, others)].all() and not sees[positions, positions].any()
        seen = sees[np.ix_(positions, positions)]
        order = np.argsort(seen.sum(axis=1))
        assert sorted(seen.sum(axis=1)) == list(range(len(positions)))
        for rank, i in enumerate(order):
            assert set(np.flatnonzero(seen[i])) == set(order[:rank])
        # Nothing is replaced in the input (XLNet never reads [MASK]); the labels are the tokens at the targets.
        assert (batch["input_ids"][row, :n].numpy() == example.input_ids).all()
        labels = batch["plm_labels"][row].numpy()
        assert (labels[: len(positions)] == example.input_ids[positions]).all()
        assert (labels[len(positions):] == -100).all()
        assert attention[row, :n].all() and not attention[row, n:].any()
    assert not targets[len(examples):].any() and (batch["plm_labels"][len(examples):] == -100).all()


def test_draws_come_from_the_given_generator_only():
    examples = random_examples(np.random.default_rng(4), 5)
    make = collator()
    first, again = make(examples, np.random.default_rng(7)), make(examples, np.random.default_rng(7))
    assert all(torch.equal(first[key], again[key]) for key in first)
    other = make(examples, np.random.default_rng(8))
    assert not torch.equal(first["perm_mask"], other["perm_mask"])


# ------------------------------------------------------------------------------------------------ the model


def test_a_prediction_reads_only_what_comes_before_it_in_the_order(setup):
    """Changing a target's own token, or a later target's, leaves its prediction as it was; an earlier target or a
    non-target changes it: the two streams get the order the collator drew."""
    objective, cfg = build(setup, dropout=0.0)
    objective.eval()
    from transformers import AutoTokenizer

    from arabert_pipeline.pretrain.data import Example

    tokenizer = AutoTokenizer.from_pretrained(cfg.tokenizer)
    ids = np.asarray(tokenizer(DOCUMENTS[0][1])["input_ids"][:30], dtype=np.int64)
    ids[-1] = tokenizer.sep_token_id
    special = np.isin(ids, [tokenizer.cls_token_id, tokenizer.sep_token_id])
    example = Example(ids, np.ones(len(ids), dtype=bool), special)
    batch = objective.collator([example], np.random.default_rng(0))
    positions = np.flatnonzero(targets_of(batch)[0])
    seen = ~batch["perm_mask"][0].numpy().astype(bool)[np.ix_(positions, positions)]
    order = positions[np.argsort(seen.sum(axis=1))]  # targets in factorisation order
    assert len(order) >= 3
    slot = {int(p): i for i, p in enumerate(positions)}  # target_mapping rows follow the positions

    def logits(changed_position):
        changed = {key: value.clone() for key, value in batch.items()}
        if changed_position is not None:
            changed["input_ids"][0, changed_position] = tokenizer.mask_token_id
        with torch.no_grad():
            return objective.model(input_ids=changed["input_ids"], attention_mask=changed.get("attention_mask"),
                                   perm_mask=changed["perm_mask"], target_mapping=changed["target_mapping"],
                                   use_mems=False).logits[0]

    base = logits(None)
    middle = int(order[1])
    after = logits(middle)
    assert torch.allclose(after[slot[middle]], base[slot[middle]], atol=1e-5), "a target never sees itself"
    assert torch.allclose(after[slot[int(order[0])]], base[slot[int(order[0])]], atol=1e-5)
    assert not torch.allclose(after[slot[int(order[2])]], base[slot[int(order[2])]], atol=1e-4)
    non_target = int(np.flatnonzero(~targets_of(batch)[0, : len(ids)] & ~special)[0])
    assert not torch.allclose(logits(non_target)[slot[int(order[0])]], base[slot[int(order[0])]], atol=1e-4)


def test_every_trained_parameter_gets_a_gradient(setup):
    """What DDP needs (a parameter without a gradient stops it); the segment weights, which one-segment inputs never
    reach, are frozen and exported all the same."""
    objective, cfg = build(setup)
    objective(objective.collator(packed_examples(cfg), np.random.default_rng(0)))["loss"].backward()
    trained = {name: p for name, p in objective.named_parameters() if p.requires_grad}
    assert [name for name, p in trained.items() if p.grad is None or not p.grad.any()] == []
    frozen = sorted(name for name, p in objective.named_parameters() if not p.requires_grad)
    assert frozen == sorted(f"model.transformer.layer.{i}.rel_attn.{n}"
                            for i in range(2) for n in ("r_s_bias", "seg_embed"))
    assert "transformer.layer.0.rel_attn.seg_embed" in objective.model.state_dict()


@pytest.mark.parametrize("size", ["tiny", "mini"])
def test_presets_are_the_bert_sizes(size):
    from transformers import BertConfig, BertForMaskedLM, XLNetLMHeadModel

    from arabert_pipeline.pretrain.config import MODEL_SIZES, bert_config_kwargs
    from arabert_pipeline.pretrain.data import SpecialIds
    from arabert_pipeline.pretrain.xlnet import xlnet_config

    layers, hidden, heads = MODEL_SIZES[size]
    xlnet = xlnet_config(1000, SpecialIds(2, 3, 0, 4), size)
    assert (xlnet.n_layer, xlnet.d_model, xlnet.n_head, xlnet.d_inner) == (layers, hidden, heads, 4 * hidden)
    assert xlnet.mem_len is None and not xlnet.bi_data and not xlnet.use_mems_eval
    count = lambda model: sum(p.numel() for p in model.parameters())  # noqa: E731  a one-line local helper
    bert = count(BertForMaskedLM(BertConfig(vocab_size=1000, **bert_config_kwargs(size))))
    d = hidden
    # BERT's without its 512 positions, 2 token types, embedding LayerNorm, MLM transform and attention biases;
    # plus, per layer, XLNet's relative-position projection, its three attention biases and its segment pair.
    bert_only = 512 * d + 2 * d + 2 * d + (d * d + 3 * d) + layers * 4 * d
    xlnet_only = layers * (d * d + 3 * d + 2 * d) + d  # + the query stream's start vector (mask_emb)
    assert count(XLNetLMHeadModel(xlnet)) == bert - bert_only + xlnet_only


def test_optimizer_groups_know_xlnet_names():
    from transformers import XLNetForQuestionAnsweringSimple

    from arabert_pipeline.pretrain.data import SpecialIds
    from arabert_pipeline.pretrain.xlnet import xlnet_config
    from arabert_pipeline.training import parameter_groups

    model = XLNetForQuestionAnsweringSimple(xlnet_config(100, SpecialIds(2, 3, 0, 4), "tiny"))
    named = dict(model.named_parameters())
    groups = parameter_groups(model, 0.01, layer_lr_decay=0.5, layers=2)
    lr_of = {id(p): g["lr_scale"] for g in groups for p in g["params"]}
    decay_of = {id(p): g["weight_decay"] for g in groups for p in g["params"]}
    # The per-head attention biases are 2-D but biases (XLNet exempts them from weight decay too).
    for name in ("r_w_bias", "r_r_bias", "r_s_bias"):
        assert decay_of[id(named[f"transformer.layer.0.rel_attn.{name}"])] == 0.0
    assert decay_of[id(named["transformer.layer.0.rel_attn.q"])] == 0.01
    assert lr_of[id(named["qa_outputs.weight"])] == 1.0
    assert lr_of[id(named["transformer.layer.1.rel_attn.q"])] == 0.5
    assert lr_of[id(named["transformer.word_embedding.weight"])] == 0.125  # below the lowest layer


def test_options_pair_plm_with_xlnet_only(setup, tmp_path):
    from arabert_pipeline.errors import ConfigError

    for objective, architecture in (("plm", "bert"), ("plm", "deberta-v2"), ("mlm", "xlnet"), ("electra", "xlnet"),
                                    ("span-selection", "xlnet")):
        with pytest.raises(ConfigError, match=f"--objective {objective} with --architecture {architecture}: "
                                              "permutation language modelling is XLNet's objective"):
            build(setup, objective=objective, architecture=architecture)
    with pytest.raises(ConfigError, match="are MLM options"):
        build(setup, whole_word_masking=True)
    with pytest.raises(ConfigError, match="--nsp needs --architecture bert"):
        build(setup, nsp=True)
    with pytest.raises(ConfigError, match="--masking span applies to the mlm and electra"):
        build(setup, masking="span")
    mlm, _ = build(setup, objective="mlm", architecture="bert")
    mlm.export(tmp_path / "bert")
    expected = "a 'bert' model, not a --architecture xlnet encoder; add --architecture bert"
    with pytest.raises(ConfigError, match=expected):
        build(setup, model_size=None, init_from=str(tmp_path / "bert"))


# ------------------------------------------------------------------------------------------------ run, export, QA


def qa_file(path: Path) -> Path:
    """A few authored questions on the corpus's own paragraphs (answers located by search, so offsets are exact)."""
    questions = [
        (0, "من افتتح معرض الكتاب الدولي ؟", "وزير الثقافة محمد العلي"),
        (0, "كم يوما يستمر معرض الكتاب الدولي ؟", "عشرة أيام"),
        (1, "من سجل هدفي فريق النجم الساحلي ؟", "أحمد الصالحي"),
        (1, "أين فاز فريق النجم الساحلي ؟", "الملعب الأولمبي بسوسة"),
        (2, "أين ينقطع التيار ؟", "مدينة صفاقس"),
        (3, "ما الذي ارتفعت أسعاره ؟", "النفط"),
        (4, "أين نظم المؤتمر ؟", "الرياض"),
        (5, "ضد ماذا أطلقت وزارة الصحة حملة ؟", "الأنفلونزا الموسمية"),
    ]
    paragraphs = {}
    for number, (doc, question, answer) in enumerate(questions):
        context = " ".join(DOCUMENTS[doc])
        paragraph = paragraphs.setdefault(doc, {"context": context, "qas": []})
        paragraph["qas"].append({"id": f"q{number}", "question": question,
                                 "answers": [{"text": answer, "answer_start": context.index(answer)}]})
    data = {"version": "1.1", "data": [{"title": "t", "paragraphs": list(paragraphs.values())}]}
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return path


@pytest.mark.slow
def test_run_stops_resumes_exports_then_fine_tunes_and_answers(setup, tmp_path):
    from transformers import AutoModelForCausalLM, AutoModelForQuestionAnswering, AutoTokenizer, XLNetLMHeadModel

    from arabert_pipeline import Pipeline
    from arabert_pipeline.artifacts.metadata import read_metadata
    from arabert_pipeline.errors import ConfigError
    from arabert_pipeline.pretrain.trainer import pretrain
    from arabert_pipeline.qa.transformer.finetune import FinetuneConfig, run_finetune

    straight, interrupted = tmp_path / "straight", tmp_path / "interrupted"
    assert pretrain(config(setup, straight, dropout=0.0))

    def stop_at_three(trainer):
        if trainer.state.step == 3:
            trainer.request_stop()

    cfg = config(setup, interrupted, dropout=0.0)
    assert not pretrain(cfg, on_step=stop_at_three)
    cfg.resume = "latest"
    assert pretrain(cfg)
    log = lambda run: [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]  # noqa: E731  a one-line local helper
    curve = lambda run: [(r["step"], r.get("loss"), r.get("eval_plm_loss")) for r in log(run)]  # noqa: E731  a one-line local helper
    assert curve(straight) == curve(interrupted)
    assert any(r.get("eval_plm_loss") is not None for r in log(straight))

    # The export contract: a Hugging Face XLNet LM, its tokenizer beside it, the preprocessing recorded.
    model = AutoModelForCausalLM.from_pretrained(straight)
    assert type(model) is XLNetLMHeadModel and not model.config.bi_data and model.config.dropout == 0.1
    assert len(AutoTokenizer.from_pretrained(straight)) == model.config.vocab_size
    metadata = read_metadata(straight)
    assert metadata["preprocessing"] == "arabertv02" and metadata["objective"] == "plm"
    assert metadata["pretrain"]["config"]["architecture"] == "xlnet" and metadata["pretrain"]["steps"] == 6
    # --init-from continues it (same sizes, relative positions: no position limit to check).
    again, _ = build(setup, model_size=None, init_from=str(straight))
    assert all(torch.equal(a, b)
               for a, b in zip(again.model.state_dict().values(), model.state_dict().values(), strict=True))

    qa = AutoModelForQuestionAnswering.from_pretrained(straight)
    assert type(qa).__name__ == "XLNetForQuestionAnsweringSimple"
    output = tmp_path / "qa"
    squad = qa_file(tmp_path / "squad.json")
    result = run_finetune(FinetuneConfig(model=str(straight), output=str(output), train=[str(squad)], epochs=2,
                                         max_seq_length=64, doc_stride=16, max_question_tokens=16, batch_size=4,
                                         lr=1e-3, progress=False), log=lambda message: None)
    assert result.completed and result.steps >= 2
    pipe = Pipeline(output, backend="torch")
    questions, contexts = [], []
    for paragraph in json.loads(squad.read_text(encoding="utf-8"))["data"][0]["paragraphs"]:
        questions += [qa_pair["question"] for qa_pair in paragraph["qas"]]
        contexts += [paragraph["context"]] * len(paragraph["qas"])
    answers = pipe.answer(questions, contexts, top_k=3)
    for context, found in zip(contexts, answers, strict=True):
        assert found and all(a.text == context[a.start : a.end] and a.text for a in found)

    # XLNet traces to ONNX like the other encoders: the ONNX backend gives the torch backend's answers.
    pytest.importorskip("onnxruntime")
    from arabert_pipeline.qa.transformer.export import export_onnx

    export_onnx(output)
    onnx_answers = Pipeline(output, backend="onnx").answer(questions, contexts, top_k=3)
    for ours, theirs in zip(onnx_answers, answers, strict=True):
        assert [(a.start, a.end) for a in ours] == [(a.start, a.end) for a in theirs]
        assert np.allclose([a.score for a in ours], [a.score for a in theirs], atol=1e-4)

    with pytest.raises(ConfigError, match="cannot take the question-overlap token type"):
        run_finetune(FinetuneConfig(model=str(straight), output=str(tmp_path / "overlap"), train=[str(squad)],
                                    epochs=1, max_seq_length=64, doc_stride=16, max_question_tokens=16, batch_size=4,
                                    question_overlap=True, progress=False), log=lambda message: None)
