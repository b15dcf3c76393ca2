"""The whole recipe through the command line at tiny size: preprocess → train-tokenizer → pretrain → finetune →
evaluate → answer, each stage reading only what the previous one wrote."""
from __future__ import annotations

import json

import pytest

from arabert_pipeline.cli import main
from data_slices import write_first_articles, write_first_documents

DOCUMENTS = 60
# DeBERTa with its enhanced mask decoder, fine-tuned with the question-overlap token type its embeddings grow.
ARCHITECTURES = {
    "bert": ([], []),
    "deberta-v2": (["--architecture", "deberta-v2", "--enhanced-mask-decoder"], ["--question-overlap"]),
}


@pytest.mark.parametrize("architecture", list(ARCHITECTURES))
@pytest.mark.slow
def test_preprocess_tokenizer_pretrain_finetune_evaluate_answer(shared_data, tmp_path, capsys, architecture):
    import torch
    from transformers import AutoModelForMaskedLM, AutoModelForQuestionAnswering

    torch.set_num_threads(1)
    pretrain_flags, finetune_flags = ARCHITECTURES[architecture]
    raw = tmp_path / "raw.txt"
    write_first_documents(shared_data / "corpus" / "ant-jawharafm-000.txt.xz", raw, DOCUMENTS)
    train, test = tmp_path / "train.json", tmp_path / "test.json"
    write_first_articles("arcd-train", train, 3)
    write_first_articles("arcd-test", test, 2)
    corpus, tokenizer = tmp_path / "corpus.txt", tmp_path / "tokenizer"
    mlm, qa, report = tmp_path / "mlm", tmp_path / "qa", tmp_path / "report"

    assert main(["preprocess", str(raw), "-o", str(corpus), "--preprocessing", "arabertv02", "--no-progress"]) == 0
    assert main(["train-tokenizer", str(corpus), "-o", str(tokenizer), "--model-type", "unigram",
                 "--vocab-size", "800", "--no-progress"]) == 0
    assert main(["pretrain", "--tokenizer", str(tokenizer), "--corpus", str(corpus), "--model-size", "tiny",
                 "-o", str(mlm), "--max-seq-length", "128", "--steps", "6", "--batch-size", "4", "--lr", "1e-3",
                 "--whole-word-masking", "--eval-every", "6", "--eval-sequences", "8", "--log-every", "3",
                 "--cache-dir", str(tmp_path / "cache"), "--no-progress", *pretrain_flags]) == 0
    assert main(["finetune", "--model", str(mlm), "--train", str(train), "--eval", str(test), "-o", str(qa),
                 "--max-seq-length", "128", "--doc-stride", "64", "--epochs", "1", "--batch-size", "16",
                 "--skip-misaligned", "--allow-leakage", "--no-progress", *finetune_flags]) == 0
    assert main(["evaluate", "--model", str(qa), "--label", "tiny", "--data", str(test), "-o", str(report),
                 "--resamples", "100", "--pretraining-log", f"tiny={mlm / 'log.jsonl'}"]) == 0
    # Library code logs its progress; the CLI prints it on stderr.
    progress = capsys.readouterr().err
    assert "steps, " in progress and "training on" in progress and "saved" in progress

    # The exports load without this package, as the architecture asked for.
    assert AutoModelForMaskedLM.from_pretrained(mlm).config.model_type == architecture
    qa_config = AutoModelForQuestionAnswering.from_pretrained(qa).config
    assert qa_config.model_type == architecture
    assert qa_config.type_vocab_size == (3 if "--question-overlap" in finetune_flags else 2)
    # The preprocessing chosen at the start travels with every artifact, down to the QA model; every tokenizer
    # written on the way names a class transformers 4 knows too (tests/test_tokenizer_compat.py).
    for directory in (tokenizer, mlm, qa):
        assert json.loads((directory / "arabert_pipeline.json").read_text(encoding="utf-8"))["preprocessing"] == \
            "arabertv02"
        assert json.loads((directory / "tokenizer_config.json").read_text(encoding="utf-8"))["tokenizer_class"] == \
            "PreTrainedTokenizerFast"
    results = json.loads((report / "results.json").read_text(encoding="utf-8"))
    articles = json.loads(test.read_text(encoding="utf-8"))["data"]
    questions = sum(len(paragraph["qas"]) for article in articles for paragraph in article["paragraphs"])
    tiny = next(system for system in results["systems"] if system["label"] == "tiny")
    assert tiny["kind"] == "model"
    predictions = json.loads((report / "predictions" / "tiny.json").read_text(encoding="utf-8"))
    assert len(predictions) == questions and all(p["text"] for p in predictions.values())
    assert (report / "plots" / "pretraining.png").is_file() and "tiny" in (report / "table.md").read_text("utf-8")

    context = articles[0]["paragraphs"][0]["context"]
    questions_file, answers_file = tmp_path / "questions.jsonl", tmp_path / "answers.jsonl"
    questions_file.write_text(json.dumps({"id": "q1", "question": "ما هو؟", "context": context}, ensure_ascii=False),
                              encoding="utf-8")
    assert main(["answer", "--model", str(qa), "--input", str(questions_file), "--output", str(answers_file)]) == 0
    answer = json.loads(answers_file.read_text(encoding="utf-8").splitlines()[0])
    assert answer["answer"] and context[answer["start"]:answer["end"]] == answer["answer"]

    # Exported to ONNX, the model answers the same without torch (the default backend once model.onnx exists).
    assert main(["export-onnx", str(qa)]) == 0
    onnx_file = tmp_path / "answers-onnx.jsonl"
    assert main(["answer", "--model", str(qa), "--input", str(questions_file), "--output", str(onnx_file)]) == 0
    on_onnx = json.loads(onnx_file.read_text(encoding="utf-8").splitlines()[0])
    assert (on_onnx["start"], on_onnx["end"]) == (answer["start"], answer["end"])
    assert on_onnx["score"] == pytest.approx(answer["score"], abs=1e-4)
