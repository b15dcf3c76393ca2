"""tokenizer-report: words counted on the original text, tokens attributed through the preprocessing's offsets."""
from __future__ import annotations

import json

import pytest

from arabert_pipeline.cli import main
from arabert_pipeline.errors import ConfigError, InputError
from arabert_pipeline.tokenizer import tokenizer_report
from arabert_pipeline.tokenizer.cli import parse_spec

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "ال+", "كتاب", "جميل", ".", "##ل", "و"]


@pytest.fixture
def files(tmp_path):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    text = tmp_path / "held-out.txt"
    text.write_text("الكتاب جميل.\n\n", encoding="utf-8")
    return vocab, text


def test_segmented_and_raw_preprocessing_are_measured_on_the_same_original_words(files):
    vocab, text = files
    stats, described = tokenizer_report([("seg", str(vocab), "arabertv2"), ("raw", str(vocab), "none")], text,
                                        progress=False)
    seg, raw = stats
    # A path outside the data root and the cwd: its name.
    assert described == {"text": text.name, "lines": 1, "words": 2}
    # "ال+ كتاب جميل ." : the clitic piece counts for الكتاب, the full stop for no word.
    assert (seg.words, seg.word_tokens, seg.split_words, seg.tokens, seg.unk_tokens) == (2, 3, 1, 4, 0)
    assert seg.fertility == 1.5 and seg.split_rate == 0.5 and seg.vocab_use == 4 / len(VOCAB)
    # Unsegmented, الكتاب has no WordPiece cover in this vocabulary: one [UNK].
    assert (raw.words, raw.word_tokens, raw.split_words, raw.tokens, raw.unk_tokens, raw.unk_words) == (2, 2, 0, 3,
                                                                                                      1, 1)
    assert raw.unk_rate == pytest.approx(1 / 3) and raw.unk_word_rate == 0.5


def test_cli_prints_and_writes_the_table(files, tmp_path, capsys):
    vocab, text = files
    prefix = tmp_path / "report"
    code = main(["tokenizer-report", "--tokenizer", f"{vocab},preprocessing=arabertv2,name=tiny", "--text", str(text),
                 "-o", str(prefix), "--no-progress"])
    out = capsys.readouterr().out
    assert code == 0 and "| tiny | arabertv2 | wordpiece | 11 | 1.500 | 50.0% |" in out
    assert "counted on the original (unpreprocessed) text" in out
    assert json.loads((tmp_path / "report.json").read_text())["tokenizers"][0]["fertility"] == 1.5
    assert (tmp_path / "report.md").read_text(encoding="utf-8").startswith("Held-out text:")


def test_specs_and_errors(files, tmp_path):
    vocab, text = files
    assert parse_spec(f"{vocab},preprocessing=none,name=mBERT") == ("mBERT", str(vocab), "none")
    assert parse_spec(str(vocab)) == ("vocab", str(vocab), None)
    with pytest.raises(ConfigError, match="expected PATH"):
        parse_spec(f"{vocab},lowercase=yes")
    with pytest.raises(ConfigError, match="preprocessing"):
        tokenizer_report([("x", str(vocab), None)], text, progress=False)
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    with pytest.raises(InputError, match="empty.txt: no text"):
        tokenizer_report([("x", str(vocab), "none")], empty, progress=False)
