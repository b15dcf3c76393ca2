"""Artifacts load where pyproject.toml says they do: transformers 4.x and 5.x.

transformers 5 saves tokenizers under its own class name ("TokenizersBackend"), which 4.x cannot resolve, and saves
the truncation of the tokenizer's last call as its default. Every writer of ours goes through
`save_pretrained_tokenizer`; the first test fails if the 5.x-only name or a saved truncation comes back, the slow one
loads the shipped model (its plain fp32 copy) and freshly written tokenizers with transformers 4 in a separate venv
(benchmarks/transformers4_env.py) and compares what they give with transformers 5.
"""
from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path

import pytest

from arabert_pipeline.tokenizer.export import COMPATIBLE_TOKENIZER_CLASS

REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "arabert_pipeline" / "models" / "arabert-mini"
PAIRS = [("ما هي عاصمة الأردن ؟", "عمان هي عاصمة المملكة الأردنية الهاشمية وأكبر مدنها ."),
         ("متى تأسست الرياض ؟", "تأسست مدينة الرياض عام 1746 . " * 40)]


def _written_tokenizers(directory: Path) -> list[Path]:
    """A tokenizer dir from each of our writers: the exporter (train-tokenizer, --from-vocab) and
    save_pretrained_tokenizer (finetune, pretrain) on the tokenizers they get: ours, after a call that truncates as
    finetune's do, and a model-specific class (BertTokenizerFast, as a hub checkpoint brings)."""
    from transformers import AutoTokenizer, BertTokenizerFast

    from arabert_pipeline.tokenizer.export import save_pretrained_tokenizer, save_tokenizer, wordpiece_backend

    words = sorted({w for pair in PAIRS for text in pair for w in text.split()})
    letters = sorted({c for w in words for c in w})
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *letters, *words]
    exported = directory / "exported"
    save_tokenizer(wordpiece_backend(vocab, "arabertv02"), exported, preprocessing="arabertv02")
    tokenizer = AutoTokenizer.from_pretrained(SHIPPED)
    tokenizer(*PAIRS[1], truncation="only_second", max_length=64, stride=16, return_overflowing_tokens=True)
    resaved = directory / "resaved"
    save_pretrained_tokenizer(tokenizer, resaved)
    (directory / "vocab.txt").write_text("".join(t + "\n" for t in vocab), encoding="utf-8")
    bert = directory / "bert"
    save_pretrained_tokenizer(BertTokenizerFast(vocab=str(directory / "vocab.txt"), do_lower_case=False), bert)
    return [SHIPPED, exported, resaved, bert]


def test_written_tokenizers_name_a_class_both_major_versions_know(tmp_path):
    from transformers import AutoTokenizer, BertTokenizerFast

    for directory in _written_tokenizers(tmp_path):
        text = (directory / "tokenizer_config.json").read_text(encoding="utf-8")
        assert json.loads(text)["tokenizer_class"] == COMPATIBLE_TOKENIZER_CLASS, directory
        assert "TokenizersBackend" not in text and "truncation_strategy" not in text, directory
        saved = json.loads((directory / "tokenizer.json").read_text(encoding="utf-8"))
        assert saved["truncation"] is None and saved["padding"] is None, directory
        tokenizer = AutoTokenizer.from_pretrained(directory)
        assert len(tokenizer(PAIRS[1][1])["input_ids"]) > 64  # no truncation by default
    # Re-saved, a tokenizer encodes as before: same ids, and token types where its class gave them.
    pairs = ((AutoTokenizer.from_pretrained(tmp_path / "resaved"), AutoTokenizer.from_pretrained(SHIPPED)),
             (AutoTokenizer.from_pretrained(tmp_path / "bert"),
              BertTokenizerFast(vocab=str(tmp_path / "vocab.txt"), do_lower_case=False)))
    for saved, original in pairs:
        assert dict(saved(*PAIRS[0])) == dict(original(*PAIRS[0]))
        assert "token_type_ids" in saved(*PAIRS[0])


_CHILD = """
import json, sys
import torch, transformers
from transformers import AutoModelForQuestionAnswering, AutoTokenizer

request = json.loads(sys.stdin.read())
out = {"version": transformers.__version__, "tokenizers": {}}
for directory in request["tokenizers"]:
    tokenizer = AutoTokenizer.from_pretrained(directory)
    encoded = tokenizer([q for q, _ in request["pairs"]], [c for _, c in request["pairs"]], truncation="only_second",
                        max_length=64, stride=16, return_overflowing_tokens=True, return_offsets_mapping=True)
    out["tokenizers"][directory] = {"class": type(tokenizer).__name__, "size": len(tokenizer),
                                    "input_ids": encoded["input_ids"], "token_type_ids": encoded["token_type_ids"],
                                    "offset_mapping": [[list(o) for o in row] for row in encoded["offset_mapping"]],
                                    "overflow_to_sample_mapping": encoded["overflow_to_sample_mapping"]}
model = AutoModelForQuestionAnswering.from_pretrained(request["model"]).float().eval()
first = out["tokenizers"][request["model"]]
with torch.no_grad():
    logits = model(input_ids=torch.tensor([first["input_ids"][0]]),
                   token_type_ids=torch.tensor([first["token_type_ids"][0]]))
out["start_logits"] = logits.start_logits[0].tolist()
print(json.dumps(out))
"""


@pytest.mark.slow
def test_transformers_4_loads_the_shipped_model_and_fresh_tokenizers_as_5_does(tmp_path):
    import torch
    from transformers import AutoModelForQuestionAnswering, AutoTokenizer

    spec = importlib.util.spec_from_file_location("transformers4_env", REPO / "benchmarks" / "transformers4_env.py")
    env = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(env)
    try:
        python = env.transformers4_python()
    except (subprocess.CalledProcessError, OSError) as exc:
        pytest.skip(f"no transformers 4.x venv: creating it needs pip access to PyPI once ({exc})")
    from arabert_pipeline.weights.loading import write_plain

    # The shipped weights are int8 rows (issue 53), which transformers does not read: its plain fp32 copy is what a
    # transformers user loads (`arabert-pipeline weights DIR --plain OUT`).
    plain = write_plain(SHIPPED, tmp_path / "plain")
    directories = [str(d) for d in _written_tokenizers(tmp_path)] + [str(plain)]
    request = {"tokenizers": directories, "model": str(plain), "pairs": PAIRS}
    child = subprocess.run([python, "-c", _CHILD], input=json.dumps(request), capture_output=True, text=True)
    assert child.returncode == 0, child.stderr[-3000:]
    v4 = json.loads(child.stdout.strip().splitlines()[-1])
    assert v4["version"].startswith("4.")
    for directory in directories:
        tokenizer = AutoTokenizer.from_pretrained(directory)
        encoded = tokenizer([q for q, _ in PAIRS], [c for _, c in PAIRS], truncation="only_second", max_length=64,
                            stride=16, return_overflowing_tokens=True, return_offsets_mapping=True)
        theirs = v4["tokenizers"][directory]
        assert theirs["class"] == COMPATIBLE_TOKENIZER_CLASS and theirs["size"] == len(tokenizer)
        for key in ("input_ids", "token_type_ids", "overflow_to_sample_mapping"):
            assert theirs[key] == encoded[key], (directory, key)
        assert theirs["offset_mapping"] == [[list(o) for o in row] for row in encoded["offset_mapping"]], directory
    assert len(v4["tokenizers"][str(SHIPPED)]["input_ids"]) > len(PAIRS)  # the long context overflowed
    model = AutoModelForQuestionAnswering.from_pretrained(plain, dtype=torch.float32).eval()
    first = v4["tokenizers"][str(plain)]
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([first["input_ids"][0]]),
                       token_type_ids=torch.tensor([first["token_type_ids"][0]])).start_logits[0]
    assert torch.allclose(logits, torch.tensor(v4["start_logits"]), atol=1e-4)
