"""A small authored Arabic corpus and a matching tiny WordPiece tokenizer for the pretraining-objective tests."""
from __future__ import annotations

import json
from pathlib import Path

# Authored news-like paragraphs (not from any dataset), with names that recur within a document.
DOCUMENTS = [
    ["افتتح وزير الثقافة محمد العلي معرض الكتاب الدولي في مدينة تونس اليوم .",
     "وقال وزير الثقافة محمد العلي إن معرض الكتاب الدولي يستقبل هذا العام أكثر من مئتي دار نشر .",
     "ويستمر معرض الكتاب الدولي عشرة أيام بمشاركة كتاب من عشرين بلدا ."],
    ["فاز فريق النجم الساحلي على الترجي الرياضي بهدفين مقابل هدف في الملعب الأولمبي بسوسة .",
     "وسجل اللاعب أحمد الصالحي هدفي فريق النجم الساحلي في الشوط الثاني .",
     "وبهذا الفوز يتصدر فريق النجم الساحلي الترتيب العام للبطولة ."],
    ["أعلنت الشركة الوطنية للكهرباء عن انقطاع التيار في مدينة صفاقس يوم الأحد .",
     "وأوضحت الشركة الوطنية للكهرباء أن الانقطاع يهدف إلى صيانة الشبكة .",
     "ودعت الشركة السكان إلى الاستعداد لانقطاع التيار ساعات قليلة ."],
    ["شهدت أسعار النفط ارتفاعا ملحوظا في الأسواق العالمية خلال الأسبوع الماضي .",
     "ويتوقع الخبراء أن تواصل أسعار النفط الارتفاع بسبب تراجع الإنتاج ."],
    ["نظمت جامعة الملك سعود مؤتمرا علميا حول الذكاء الاصطناعي في الرياض .",
     "وشارك في مؤتمر الذكاء الاصطناعي باحثون من جامعة الملك سعود وجامعات أخرى ."],
    ["أطلقت وزارة الصحة حملة وطنية للتلقيح ضد الأنفلونزا الموسمية .",
     "وتستهدف حملة التلقيح الأطفال وكبار السن في جميع الولايات .",
     "وقالت وزارة الصحة إن اللقاح متوفر مجانا في المراكز الصحية ."],
]


def write_corpus_and_tokenizer(
    directory: Path, documents: list[list[str]] = DOCUMENTS, copies: int = 4, extra_words: tuple[str, ...] = ()
) -> tuple[str, str]:
    """A corpus of `copies` × `documents` and a WordPiece tokenizer whose words up to 6 letters are one token each
    (longer ones split into letters, so multi-token words occur too)."""
    from arabert_pipeline.tokenizer.export import SPECIAL_TOKENS, save_tokenizer, wordpiece_backend

    corpus = directory / "corpus.txt"
    corpus.write_text("\n\n".join("\n".join(doc) for doc in documents * copies) + "\n", encoding="utf-8")
    (directory / "corpus.txt.arabert_pipeline.json").write_text(json.dumps({"preprocessing": "arabertv02"}))
    words = sorted({w for doc in documents for line in doc for w in line.split()} | set(extra_words))
    letters = sorted({c for w in words for c in w})
    vocab = dict.fromkeys(SPECIAL_TOKENS + [w for w in words if len(w) <= 6] + letters + ["##" + c for c in letters])
    save_tokenizer(wordpiece_backend(list(vocab), "arabertv02"), directory / "tok", preprocessing="arabertv02")
    return str(corpus), str(directory / "tok")


def train_losses(objective, batches, steps: int = 30, lr: float = 3e-3) -> tuple[list[float], dict]:
    """Losses of `steps` AdamW steps cycling over `batches`, and the last step's outputs."""
    import torch

    optimizer = torch.optim.AdamW(objective.parameters(), lr=lr)
    losses = []
    for step in range(steps):
        out = objective(batches[step % len(batches)])
        out["loss"].backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(float(out["loss"].detach()))
    return losses, out


def tiny_config(setup, output="unused", **overrides):
    """A PretrainConfig for a few steps of a tiny model on `setup` = write_corpus_and_tokenizer(...); the objective
    and architecture come with `overrides` (default: BERT-size tiny MLM)."""
    from arabert_pipeline.pretrain.config import PretrainConfig

    corpus, tokenizer = setup
    options = dict(model_size="tiny", max_seq_length=32, steps=6, batch_size=4, lr=2e-3, log_every=1, eval_every=3,
                   save_every=100, eval_sequences=4, progress=False, cache_dir=str(Path(corpus).parent / "cache"))
    options.update(overrides)
    return PretrainConfig(tokenizer=tokenizer, corpus=[corpus], output=str(output), **options)


def padded_examples(cfg, rows=6):
    """`rows` packed training sequences of cfg's corpus: the longest, and its two shortest last (padded in a batch)."""
    import numpy as np
    from transformers import AutoTokenizer

    from arabert_pipeline.pretrain.data import PretrainingData, SpecialIds, TokenStore, tokenize_corpus

    tokenizer = AutoTokenizer.from_pretrained(cfg.tokenizer)
    store = TokenStore.open(tokenize_corpus(cfg.corpus, tokenizer, Path(cfg.cache_dir), progress=False))
    data = PretrainingData(store, SpecialIds.from_tokenizer(tokenizer), cfg.max_seq_length, 10_000, 4, 0)
    order = np.argsort(data.train.length)[::-1]
    picked = np.concatenate([order[: rows - 2], order[-2:]])
    return data.examples(data.train, picked, np.random.default_rng(0))


def build_tiny(setup, **overrides):
    """(the objective module, its config) for tiny_config(setup, **overrides), seeded."""
    import torch
    from transformers import AutoTokenizer

    from arabert_pipeline.pretrain.objectives import build_objective

    cfg = tiny_config(setup, **overrides)
    cfg.validate()
    torch.manual_seed(0)
    return build_objective(cfg, AutoTokenizer.from_pretrained(cfg.tokenizer)), cfg
