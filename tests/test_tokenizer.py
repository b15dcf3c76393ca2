"""Tokenizer stage at tiny scale: a few hundred corpus lines, vocabularies of a few hundred tokens."""
from __future__ import annotations

import json
import lzma
import sys
from pathlib import Path

import pytest

from arabert_pipeline.artifacts.metadata import SIDECAR_SUFFIX
from arabert_pipeline.cli import main
from arabert_pipeline.errors import ConfigError, InputError
from arabert_pipeline.tokenizer import import_vocab, load_tokenizer, train_tokenizer
from arabert_pipeline.tokenizer.export import PLACEHOLDERS, segmentation_markers
from arabert_pipeline.tokenizer.train import read_recipe
from conftest import REPO, SHARED_DATA

TRAIN_LINES = 300
VOCAB = 400
RECIPES = sorted((REPO / "tokenizer_training").glob("*.toml"))


def _corpus_lines(shard: str, n: int) -> list[str]:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"needs the shared data at {SHARED_DATA}")
    lines = []
    with lzma.open(SHARED_DATA / "corpus" / shard, "rt", encoding="utf-8") as f:
        for line in f:
            if line.strip():
                lines.append(line.rstrip("\n"))
                if len(lines) == n:
                    break
    return lines


def _write_preprocessed(path: Path, lines: list[str], name: str) -> Path:
    """A corpus file as `arabert-pipeline preprocess` leaves it: text plus sidecar."""
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    Path(str(path) + SIDECAR_SUFFIX).write_text(json.dumps({"preprocessing": name, "lines": len(lines)}))
    return path


@pytest.fixture(scope="session")
def work(tmp_path_factory):
    """Raw and preprocessed training text, held-out preprocessed lines, and tiny tokenizers trained once."""
    from arabert_pipeline import Preprocessor

    root = tmp_path_factory.mktemp("tok")
    raw = _corpus_lines("ant-multisource-000.txt.xz", TRAIN_LINES)
    held_out = _corpus_lines("ant-multisource-006.txt.xz", 200)
    (root / "raw.txt").write_text("\n\n".join(raw) + "\n", encoding="utf-8")  # blank lines between "documents"
    seg, noseg = Preprocessor("arabertv2"), Preprocessor("arabertv02")
    _write_preprocessed(root / "seg.txt", seg.preprocess_batch(raw), "arabertv2")
    w = {"root": root, "raw": root / "raw.txt", "seg": root / "seg.txt",
         "held_out_seg": seg.preprocess_batch(held_out), "held_out_noseg": noseg.preprocess_batch(held_out)}
    common = dict(vocab_size=VOCAB, threads=1, progress=False)
    # Segmented: from the sidecar file (preprocessing read from the sidecar). Unsegmented: from raw text.
    train_tokenizer([w["seg"]], root / "unigram-seg", model_type="unigram", **common)
    train_tokenizer([w["seg"]], root / "wordpiece-seg", model_type="wordpiece", **common)
    train_tokenizer([w["raw"]], root / "unigram-noseg", model_type="unigram", preprocess="arabertv02", **common)
    train_tokenizer([w["raw"]], root / "wordpiece-noseg", model_type="wordpiece", preprocess="arabertv02", **common)
    return w


# --------------------------------------------------------------------------------------------------------------
# Export: a standard fast tokenizer, SentencePiece ids, template, offsets


@pytest.mark.parametrize("name", ["unigram-seg", "unigram-noseg", "wordpiece-seg", "wordpiece-noseg"])
def test_directory_loads_as_fast_tokenizer_with_bert_template(work, name):
    from transformers import AutoTokenizer

    directory = work["root"] / name
    tokenizer = AutoTokenizer.from_pretrained(str(directory))
    assert tokenizer.is_fast and len(tokenizer) == VOCAB
    meta = json.loads((directory / "arabert_pipeline.json").read_text())
    assert meta["preprocessing"] == ("arabertv2" if "-seg" in name else "arabertv02")
    assert meta["model_type"] == name.split("-")[0] and meta["vocab_size"] == VOCAB
    assert (directory / ("sentencepiece.model" if name.startswith("unigram") else "vocab.txt")).is_file()

    a, b = "ال+ وزير", "ب+ ال+ رياض"
    enc = tokenizer(a, b, return_offsets_mapping=True)
    tokens = tokenizer.convert_ids_to_tokens(enc["input_ids"])
    n_a = len(tokenizer(a, add_special_tokens=False)["input_ids"])
    assert tokens[0] == "[CLS]" and tokens[n_a + 1] == "[SEP]" and tokens[-1] == "[SEP]"
    assert enc["token_type_ids"] == [0] * (n_a + 2) + [1] * (len(tokens) - n_a - 2)
    assert enc["offset_mapping"][0] == (0, 0) and enc["offset_mapping"][-1] == (0, 0)


def test_model_directory_with_bert_config_keeps_our_pre_tokenizer(work, tmp_path):
    """A model dir (config.json of model_type bert) must not make AutoTokenizer rebuild BERT's `+`-splitting
    pre-tokenizer (which transformers 5's BertTokenizer class does)."""
    import shutil

    from transformers import AutoTokenizer, BertConfig

    directory = tmp_path / "model"
    shutil.copytree(work["root"] / "wordpiece-seg", directory)
    BertConfig(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=1, num_attention_heads=1,
               intermediate_size=64).save_pretrained(str(directory))
    tokenizer = AutoTokenizer.from_pretrained(str(directory))
    assert tokenizer.tokenize("ال+ وزير +ها")[0] == "ال+"
    assert "+" not in tokenizer.tokenize("ال+ وزير +ها")


@pytest.mark.parametrize("name", ["unigram-seg", "unigram-noseg"])
def test_unigram_ids_identical_to_sentencepiece(work, name):
    import sentencepiece as spm

    directory = work["root"] / name
    tokenizer, _ = load_tokenizer(directory)
    sp = spm.SentencePieceProcessor(model_file=str(directory / "sentencepiece.model"))
    lines = work["held_out_seg" if "-seg" in name else "held_out_noseg"]
    # Not strict: each placeholder goes in front of one of the first lines.
    with_placeholders = [f"{p} {line}" for p, line in zip(PLACEHOLDERS, lines, strict=False)]
    lines = lines + with_placeholders + ["  كتب   [رابط]  ", "x", "☃ 12"]
    fast = tokenizer(lines, add_special_tokens=False)["input_ids"]
    mismatches = [line for line, ids in zip(lines, fast, strict=True) if ids != sp.encode(line)]
    assert len(lines) > 200 and mismatches == []
    # Exact on ties too (which a few hundred lines rarely show): scores add exactly in float32 and float64.
    scores = [sp.get_score(i) for i in range(sp.get_piece_size())]
    assert all(s * 64 == int(s * 64) for s in scores)
    assert sp.piece_to_id("[رابط]") == 5 and sp.get_score(5) == 0 and not sp.is_control(5)


def _stray_plus(tokens: list[str]) -> list[str]:
    return [t for t in tokens if t.replace("▁", "").replace("##", "") == "+"]


@pytest.mark.parametrize("name", ["unigram-seg", "wordpiece-seg"])
def test_segmentation_markers_and_placeholders_stay_whole(work, name):
    tokenizer, _ = load_tokenizer(work["root"] / name)
    for line in work["held_out_seg"]:
        assert _stray_plus(tokenizer.tokenize(line)) == [], line
    frequent = ["ال+", "و+", "ب+", "ل+", "+ها", "+ون", "+ات", "+ه"]
    for marker in frequent + PLACEHOLDERS:
        pieces = [t.replace("▁", "") for t in tokenizer.tokenize(marker) if t != "▁"]
        assert pieces == [marker], (marker, pieces)
    assert _stray_plus(tokenizer.tokenize(" ".join(segmentation_markers()))) == []


def test_arabertv2_vocab_keeps_markers_unlike_bert_pre_tokenizer(full_data, tmp_path):
    """arabert issue #151: BERT's pre-tokenizer splits `ال+` into `ال` `+`; the imported tokenizer does not."""
    from transformers import BertTokenizer

    vocab = full_data / "vocab" / "arabertv2-farasa-segmented-vocab.txt"  # CRLF, no final newline
    text = "و+ ال+ كتاب +ها [رابط]"
    bert = BertTokenizer(vocab=str(full_data / "vocab" / "arabertv2-farasa-segmented-vocab.lf.txt"),
                         do_lower_case=False)
    assert "+" in bert.tokenize(text)  # the bug this export avoids
    ours = import_vocab(vocab, tmp_path / "arabertv2", preprocessing="arabertv2")
    tokenizer, name = load_tokenizer(ours)
    assert name == "arabertv2" and tokenizer.tokenize(text) == ["و+", "ال+", "كتاب", "+ها", "[رابط]"]
    lf, _ = load_tokenizer(full_data / "vocab" / "arabertv2-farasa-segmented-vocab.lf.txt", "arabertv2")
    assert lf.get_vocab() == tokenizer.get_vocab() and len(lf) == 64000


def test_mbert_vocab_is_plain_bert_on_raw_text(shared_data):
    from transformers import BertTokenizer

    path = shared_data / "vocab" / "mbert-cased-vocab.txt"
    tokenizer, name = load_tokenizer(path, "none")
    reference = BertTokenizer(vocab=str(path), do_lower_case=False)
    text = "قال الرئيسُ إنّ 3 وزراء (Ministers) وصلوا."
    assert name == "none" and tokenizer.tokenize(text) == reference.tokenize(text)


def test_wordpiece_keeps_diacritics_hamza_and_case(work):
    tokenizer, _ = load_tokenizer(work["root"] / "wordpiece-noseg")
    text = "الكِتَابُ أُنشئَ ABC"
    assert tokenizer.backend_tokenizer.normalizer.normalize_str(text) == text


@pytest.mark.slow
def test_offsets_round_trip_on_arcd_contexts(work, shared_data):
    from arabert_pipeline import Preprocessor

    data = json.loads((shared_data / "qa" / "arcd.json").read_text(encoding="utf-8"))
    contexts = [p["context"] for article in data["data"][:8] for p in article["paragraphs"]][:20]

    def bare(text):  # Farasa's segment marks depend on the word around a piece: letters only
        return text.replace("+", "").replace(" ", "")

    for name, preprocessing in [("unigram-seg", "arabertv2"), ("wordpiece-seg", "arabertv2"),
                                ("unigram-noseg", "arabertv02"), ("wordpiece-noseg", "arabertv02")]:
        tokenizer, _ = load_tokenizer(work["root"] / name)
        preprocessor = Preprocessor(preprocessing)
        for context in contexts:
            out, to_original = preprocessor.preprocess_with_offsets(context)
            enc = tokenizer(out, add_special_tokens=False, return_offsets_mapping=True)
            covered = [0] * len(out)
            previous = 0
            tokens = tokenizer.convert_ids_to_tokens(enc["input_ids"])
            for token, (s, e) in zip(tokens, enc["offset_mapping"], strict=True):
                if token == "▁":  # SentencePiece's lone word-start piece: points at the next word's first char
                    continue
                assert s >= previous and e > s
                if token != "[UNK]":
                    assert out[s:e] == token.removeprefix("▁").removeprefix("##"), (name, token, out[s:e])
                covered[s:e] = [c + 1 for c in covered[s:e]]
                start, end = to_original[s][0], to_original[e - 1][1]
                assert 0 <= start < end <= len(context)
                if token != "[UNK]":  # the original characters behind the token, and no others
                    # Farasa restores the alif that "لل" elides ("للدولة" → "ل+ ال+ دول +ة"): it has no source.
                    sourced = "".join(out[k] for k in range(s, e) if to_original[k][0] < to_original[k][1])
                    assert bare(preprocessor.preprocess(context[start:end])) == bare(sourced), (name, token, start)
                previous = e
            assert all(n == 1 for ch, n in zip(out, covered, strict=True) if ch != " "), name


def test_same_seed_same_tokenizer(work, tmp_path):
    for run in ("a", "b"):
        train_tokenizer([work["seg"]], tmp_path / run, vocab_size=VOCAB, threads=1, progress=False, seed=7,
                        sample_sentences=200)
    assert (tmp_path / "a" / "tokenizer.json").read_bytes() == (tmp_path / "b" / "tokenizer.json").read_bytes()
    assert json.loads((tmp_path / "a" / "arabert_pipeline.json").read_text())["lines_used"] == 200


# --------------------------------------------------------------------------------------------------------------
# Preprocessing contract and bad input


def test_sidecar_preprocessing_mismatch_is_refused(work, tmp_path):
    with pytest.raises(ConfigError, match="arabertv2.*arabertv02|arabertv02.*arabertv2"):
        train_tokenizer([work["seg"]], tmp_path / "tok", preprocess="arabertv02", vocab_size=VOCAB, progress=False)
    assert not (tmp_path / "tok").exists()
    with pytest.raises(ConfigError, match="--preprocessing"):
        train_tokenizer([work["raw"]], tmp_path / "tok", input_is_preprocessed=True, vocab_size=VOCAB,
                        progress=False)


@pytest.mark.parametrize("model_type", ["unigram", "wordpiece"])
def test_vocab_larger_than_corpus_supports_is_explained(work, tmp_path, model_type):
    lines = (work["root"] / "seg.txt").read_text(encoding="utf-8").splitlines()[:20]
    small = _write_preprocessed(tmp_path / "small.txt", lines, "arabertv2")
    previous = tmp_path / "tok"
    previous.mkdir()
    (previous / "tokenizer.json").write_text("an earlier tokenizer")
    with pytest.raises(ConfigError, match="more than this corpus supports"):
        train_tokenizer([small], previous, model_type=model_type, vocab_size=50000, threads=1, progress=False,
                        overwrite=True)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary or lock left behind
    assert [p.name for p in previous.iterdir()] == ["tokenizer.json"]  # the old directory is untouched


def test_bad_inputs_name_the_file(tmp_path):
    blank = tmp_path / "blank.txt"
    blank.write_text("\n  \n\n")
    with pytest.raises(InputError, match="blank.txt.*only blank lines"):
        train_tokenizer([blank], tmp_path / "a", preprocess="none", progress=False)
    with pytest.raises(InputError, match="missing.txt: no such file"):
        train_tokenizer([tmp_path / "missing.txt"], tmp_path / "a", preprocess="none", progress=False)
    broken = tmp_path / "broken.txt.xz"
    broken.write_bytes(b"not xz at all")
    with pytest.raises(InputError, match="broken.txt.xz: cannot read"):
        train_tokenizer([broken], tmp_path / "a", preprocess="none", progress=False)
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("سطر أول\n".encode() + "caf\xe9\n".encode("latin-1"))
    with pytest.raises(InputError, match="latin1.txt: line 2: invalid UTF-8"):
        train_tokenizer([latin1], tmp_path / "a", preprocess="none", vocab_size=20, progress=False)
    with pytest.raises(ConfigError, match="model_type"):
        train_tokenizer([latin1], tmp_path / "a", model_type="bpe", progress=False)
    assert not (tmp_path / "a").exists()


def test_vocab_file_errors(tmp_path):
    dup = tmp_path / "vocab.txt"
    dup.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nكتب\nكتب\n", encoding="utf-8")
    with pytest.raises(InputError, match="line 7: duplicate token"):
        load_tokenizer(dup, "arabertv02")
    dup.write_text("كتب\nقرأ\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"lacks the BERT special token\(s\) \[PAD\] \[UNK\]"):
        load_tokenizer(dup, "arabertv02")
    with pytest.raises(InputError, match="no such file"):
        load_tokenizer(tmp_path / "nope" / "vocab.txt", "none")


def test_load_tokenizer_needs_the_preprocessing_of_foreign_tokenizers(work, tmp_path):
    import shutil

    foreign = tmp_path / "foreign"
    shutil.copytree(work["root"] / "wordpiece-noseg", foreign)
    (foreign / "arabert_pipeline.json").unlink()
    with pytest.raises(ConfigError, match="preprocessing"):
        load_tokenizer(foreign)
    assert load_tokenizer(foreign, "arabertv02")[1] == "arabertv02"
    with pytest.raises(ConfigError, match="built for preprocessing 'arabertv02', not 'none'"):
        load_tokenizer(work["root"] / "wordpiece-noseg", "none")
    with pytest.raises(ConfigError, match="preprocessing"):
        load_tokenizer(work["root"] / "wordpiece-noseg" / "vocab.txt")


# --------------------------------------------------------------------------------------------------------------
# CLI and recipes


def test_cli_train_with_recipe_and_overrides(work, tmp_path, capsys):
    recipe = tmp_path / "recipe.toml"
    recipe.write_text('description = "tiny"\nmodel_type = "wordpiece"\nvocab_size = 64000\n'
                      f'output_dir = "{tmp_path / "from-recipe"}"\n', encoding="utf-8")
    out = tmp_path / "cli"
    code = main(["train-tokenizer", str(work["seg"]), "--recipe", str(recipe), "-o", str(out), "--vocab-size",
                 str(VOCAB), "--threads", "1", "--no-progress"])
    assert code == 0 and "wordpiece tokenizer, 400 tokens, preprocessing arabertv2" in capsys.readouterr().out
    assert json.loads((out / "arabert_pipeline.json").read_text())["model_type"] == "wordpiece"
    assert not (tmp_path / "from-recipe").exists()

    assert main(["train-tokenizer", str(work["seg"]), "-o", str(tmp_path / "x"), "--preprocessing", "arabertv02",
                 "--no-progress"]) == 2
    assert "preprocessed with 'arabertv2'" in capsys.readouterr().err


@pytest.mark.slow
def test_cli_from_vocab(shared_data, tmp_path, capsys):
    out = tmp_path / "mbert"
    vocab = shared_data / "vocab" / "mbert-cased-vocab.txt"
    assert main(["train-tokenizer", "--from-vocab", str(vocab), "-o", str(out)]) == 2
    assert "--preprocessing" in capsys.readouterr().err
    assert main(["train-tokenizer", "--from-vocab", str(vocab), "-o", str(out), "--preprocessing", "none"]) == 0
    assert load_tokenizer(out)[1] == "none" and (out / "vocab.txt").read_bytes() == vocab.read_bytes()


@pytest.mark.parametrize("recipe", RECIPES, ids=[r.stem for r in RECIPES])
def test_recipes_parse_and_hold_out_the_report_shard(recipe, full_data):
    options = read_recipe(recipe)
    assert options["model_type"] in ("unigram", "wordpiece") and options["preprocess"] in ("arabertv2", "arabertv02")
    names = [Path(p).name for p in options["inputs"]]
    assert len(names) == 14 and "ant-multisource-006.txt.xz" not in names


def test_a_recipe_reads_on_python_3_10_whose_standard_library_has_no_tomllib(tmp_path, monkeypatch):
    """requires-python is 3.10 and tomllib came in 3.11: there the recipe reader takes tomli, the same parser (mypy at
    python_version 3.10 found the import, issue 61). Python 3.10 is imitated: tomllib unimportable, the version 3.10."""
    pytest.importorskip("tomli")
    monkeypatch.setitem(sys.modules, "tomllib", None)  # `import tomllib` raises ModuleNotFoundError, as on 3.10
    monkeypatch.setattr(sys, "version_info", (3, 10, 13, "final", 0))
    recipe = tmp_path / "recipe.toml"
    recipe.write_text('description = "tiny"\nmodel_type = "wordpiece"\nvocab_size = 400\n', encoding="utf-8")
    assert read_recipe(recipe) == {"model_type": "wordpiece", "vocab_size": 400}
    recipe.write_text('vocab_size = \n', encoding="utf-8")
    with pytest.raises(InputError, match=r"recipe.toml: invalid TOML \(Invalid value"):
        read_recipe(recipe)


def test_recipe_errors(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('vocab_sise = 100\n')
    with pytest.raises(InputError, match="bad.toml: vocab_sise: unknown key"):
        read_recipe(bad)
    bad.write_text('inputs = ["corpus/none-*.txt.xz"]\n')
    with pytest.raises(InputError, match="no file matches"):
        read_recipe(bad)
