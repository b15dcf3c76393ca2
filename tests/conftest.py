"""Shared fixtures. Tests that need data find it in ../shared/data (CI has it there) or, on a fresh clone without it,
in tests/data/shared: licensed slices laid out the same way (tests/data/make_shared_slices.py). The few tests about
properties of the full sets ask for `full_data` and skip on the slices. Fixtures that build something (a tiny model,
data slices) are session-scoped: built once, shared by every test that asks."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SLICES = REPO / "tests" / "data" / "shared"
_FULL = REPO.parent / "shared" / "data"
SHARED_DATA = Path(os.environ.get("ARABERT_PIPELINE_TEST_DATA", _FULL if _FULL.is_dir() else SLICES))
SAMPLES = REPO / "data"

try:
    from hypothesis import settings as _hypothesis_settings
except ImportError:  # the property tests skip themselves without hypothesis
    pass
else:
    # The suite draws the same examples on every run, so that CI's pass or failure is reproducible; new examples are
    # explored on purpose: HYPOTHESIS_PROFILE=explore pytest tests/test_preprocess_properties.py ...
    _hypothesis_settings.register_profile("repeatable", derandomize=True)
    _hypothesis_settings.register_profile("explore", derandomize=False)
    _hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))


@pytest.fixture(scope="session", autouse=True)
def _data_root():
    """Point the package's data root at the shared data, so dataset names resolve the way they do for users."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ARABERT_PIPELINE_DATA", str(SHARED_DATA))
        yield


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"needs the shared data at {SHARED_DATA} (set ARABERT_PIPELINE_TEST_DATA to use another folder)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def full_data(shared_data) -> Path:
    """The full shared data, for tests of the sets themselves (their counts, the official split's leak)."""
    if shared_data.resolve() == SLICES.resolve():
        pytest.skip("checks the full shared data; tests/data/shared holds slices")
    return shared_data


@pytest.fixture
def samples() -> Path:
    return SAMPLES


def build_tiny_bert(directory: Path, texts, model_class: str, *, vocab_size: int, max_positions: int) -> Path:
    """A random BERT L2/H64 (`model_class`: "BertForMaskedLM", "BertForQuestionAnswering", …) with a WordPiece vocab
    trained on `texts`, saved in `directory` with preprocessing "none"."""
    import torch
    import transformers
    from tokenizers import BertWordPieceTokenizer

    from arabert_pipeline.artifacts.metadata import write_metadata

    directory.mkdir(parents=True, exist_ok=True)
    wordpiece = BertWordPieceTokenizer(lowercase=False, strip_accents=False)
    wordpiece.train_from_iterator(sorted(set(texts)), vocab_size=vocab_size, show_progress=False)
    wordpiece.save_model(str(directory))
    tokenizer = transformers.BertTokenizerFast(vocab=str(directory / "vocab.txt"), do_lower_case=False,
                                               strip_accents=False)
    tokenizer.save_pretrained(directory)
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=len(tokenizer), hidden_size=64, num_hidden_layers=2,
                                     num_attention_heads=2, intermediate_size=128,
                                     max_position_embeddings=max_positions)
    getattr(transformers, model_class)(config).save_pretrained(directory)
    write_metadata(directory, preprocessing="none")
    return directory


@pytest.fixture(scope="session")
def tiny_mlm(shared_data, tmp_path_factory):
    """A random BERT L2/H64 MLM checkpoint with a 2,000-piece WordPiece vocab trained on ARCD-train."""
    pytest.importorskip("torch")
    from arabert_pipeline.qa.data import read_squad

    examples = read_squad("arcd-train", misaligned="keep").examples
    return build_tiny_bert(tmp_path_factory.mktemp("tiny-mlm"), (e["context"] for e in examples), "BertForMaskedLM",
                           vocab_size=2000, max_positions=256)


@pytest.fixture(scope="session")
def qa_slices(shared_data, tmp_path_factory):
    """The first 6 articles of ARCD-train and the first 3 of ARCD-test, as SQuAD files."""
    from data_slices import write_first_articles

    directory = tmp_path_factory.mktemp("qa-slices")
    return (write_first_articles("arcd-train", directory / "train6.json", 6),
            write_first_articles("arcd-test", directory / "test3.json", 3))
