"""A model dir whose tokenizer is a sibling's (tokenizer.shared.json, as the shipped arabert-sentiment and arabert-ner
hold) is copied with a real tokenizer.json: `export-onnx --standalone` and `weights.loading.write_plain` write the
shared file out, so the copy loads where no sibling is beside it."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

import task_toys as toys

torch = pytest.importorskip("torch")

from arabert_pipeline.cli import main  # noqa: E402  after the importorskip above
from arabert_pipeline.weights.loading import write_plain  # noqa: E402  after the importorskip above
from arabert_pipeline.weights.shared_tokenizer import SHARED_TOKENIZER_FILE, share_tokenizer  # noqa: E402  likewise


def shared_with_sibling(model_dir, root):
    """MODEL_DIR's tokenizer.json moved into a sibling `mini/` and replaced by a reference to it."""
    mini = root / "mini"
    mini.mkdir()
    shutil.copyfile(model_dir / "tokenizer.json", mini / "tokenizer.json")
    share_tokenizer(model_dir, mini)
    assert not (model_dir / "tokenizer.json").exists() and (model_dir / SHARED_TOKENIZER_FILE).is_file()
    return mini


@pytest.mark.slow  # over a CPU second: the quick loop keeps this file's cheaper tests
def test_the_standalone_copy_of_a_model_sharing_its_tokenizer_holds_the_tokenizer(tmp_path):
    from arabert_pipeline.classification.model import OnnxTextClassifier
    from arabert_pipeline.finetuning.taskexport import standalone

    root = tmp_path / "models"
    root.mkdir()
    train, dev = toys.texts(48, 0), toys.texts(16, 1)
    encoder = toys.tiny_encoder(tmp_path / "encoder", [r["text"] for r in train])
    with toys.one_thread():
        assert main(["finetune", "--task", "classification", "--model", str(encoder), "-o", str(root / "cls"),
                     "--train", str(toys.write_jsonl(tmp_path / "train.jsonl", train)),
                     "--dev", str(toys.write_jsonl(tmp_path / "dev.jsonl", dev)), "--epochs", "1",
                     "--batch-size", "16", "--max-seq-length", "32", "--no-progress"]) == 0
        assert main(["export-onnx", str(root / "cls")]) == 0
    mini = shared_with_sibling(root / "cls", root)
    texts = ["الفيلم جميل جدا", "الخدمة سيء اليوم"]
    expected = OnnxTextClassifier.load(root / "cls", quantize=True).predict_proba(texts)  # read through the reference
    shipped = tmp_path / "elsewhere" / "shipped"  # no mini/ beside it
    # standalone() itself: the CLI's --standalone re-exports first, and that export reads a literal tokenizer.json
    standalone(root / "cls", shipped)
    assert (shipped / "tokenizer.json").read_bytes() == (mini / "tokenizer.json").read_bytes()
    assert not (shipped / SHARED_TOKENIZER_FILE).exists()
    assert np.allclose(OnnxTextClassifier.load(shipped).predict_proba(texts), expected, atol=1e-4)


def test_the_plain_copy_of_a_model_sharing_its_tokenizer_holds_the_tokenizer(tmp_path):
    from transformers import AutoTokenizer

    from conftest import build_tiny_bert

    root = tmp_path / "models"
    build_tiny_bert(root / "qa", ["نص قصير للتجربة", "كلمات أخرى هنا"], "BertForQuestionAnswering", vocab_size=60,
                    max_positions=64)
    mini = shared_with_sibling(root / "qa", root)
    plain = write_plain(root / "qa", tmp_path / "plain")
    assert (plain / "tokenizer.json").read_bytes() == (mini / "tokenizer.json").read_bytes()
    assert AutoTokenizer.from_pretrained(plain)("نص قصير")["input_ids"]
