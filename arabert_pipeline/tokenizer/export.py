"""Hugging Face fast tokenizers from SentencePiece unigram models and WordPiece vocabularies; saving and loading.

A tokenizer directory written here loads with `AutoTokenizer.from_pretrained(DIR)` (no need for this package):
`tokenizer.json` + `tokenizer_config.json` (class `PreTrainedTokenizerFast`, inputs `input_ids`, `token_type_ids`,
`attention_mask`, template `[CLS] A [SEP] B [SEP]`), plus `sentencepiece.model` (unigram) or `vocab.txt`
(WordPiece), plus `arabert_pipeline.json` recording the preprocessing the tokenizer expects.

Segmentation markers (`ال+`, `+ها`, ...) must never lose their `+` (arabert issue #151: BERT's pre-tokenizer treats `+`
as punctuation and splits `ال+` into `ال` `+`). So:
- unigram: split on whitespace only, then Metaspace; the markers are reserved pieces scoring 0 (`▁ال+`, see
  train.py), so Viterbi always keeps them whole;
- WordPiece on preprocessed text: split on whitespace and BERT punctuation except `+` (the preprocessing has already
  put spaces around punctuation, so this only matters for stray brackets);
- WordPiece on raw text (preprocessing "none", the mBERT baseline): BERT's own pre-tokenizer, as mBERT was trained.
"""
from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from ..artifacts.metadata import METADATA_FILE, write_metadata
from ..artifacts.models import looks_like_local_path
from ..errors import ConfigError, InputError
from ..outputs import OutputKind, OutputLock, claim_output_dir, remove_stale_temporaries

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
PLACEHOLDERS = ["[رابط]", "[بريد]", "[مستخدم]"]
SENTENCEPIECE_FILE = "sentencepiece.model"
VOCAB_FILE = "vocab.txt"
MODEL_MAX_LENGTH = 512
# The class name written into tokenizer_config.json: one that transformers 4.x and 5.x both know.
COMPATIBLE_TOKENIZER_CLASS = "PreTrainedTokenizerFast"
# tokenizer_config.json entries that record how the tokenizer was last called or loaded, not what it is.
_CALL_STATE_KEYS = ("max_length", "stride", "truncation_strategy", "is_local", "local_files_only")
METASPACE = "▁"
# BERT's punctuation (ASCII non-alphanumerics and Unicode P*) minus `+`, which carries the segmentation markers.
PUNCTUATION_EXCEPT_PLUS = r"[!-*,-/:-@\[-`{-~]|\p{P}"
TOKENIZER_OUTPUT = OutputKind(
    "train-tokenizer",
    names=("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", SENTENCEPIECE_FILE, VOCAB_FILE,
           METADATA_FILE),
    markers=("tokenizer.json",),
)


def segmentation_markers() -> list[str]:
    """The `+`-marked clitics of Farasa-segmented text (`ال+`, `+ها`, ...), as the words they are."""
    from ..preprocess.segment import PREFIXES, SUFFIXES

    return sorted(p + "+" for p in PREFIXES) + sorted("+" + s for s in SUFFIXES)


def unigram_backend(model_file: str | os.PathLike):
    """A `tokenizers.Tokenizer` giving the same ids as the SentencePiece unigram model in `model_file`.

    transformers' own converters need a slow tokenizer class and protobuf; a unigram model is only pieces and
    scores, which the SentencePiece API gives directly. The model must use the identity normalization (our
    Preprocessor normalizes), so no charsmap is needed.
    """
    import sentencepiece as spm
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    sp = spm.SentencePieceProcessor(model_file=str(model_file))
    vocab = [(sp.id_to_piece(i), sp.get_score(i)) for i in range(sp.get_piece_size())]
    backend = Tokenizer(models.Unigram(vocab, unk_id=sp.unk_id(), byte_fallback=False))
    # Splitting on whitespace first keeps the spaces out of the offsets; Metaspace then marks each word as
    # SentencePiece does (it also collapses runs of spaces and drops leading/trailing ones, as SentencePiece does).
    backend.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.WhitespaceSplit(),
        pre_tokenizers.Metaspace(replacement=METASPACE, prepend_scheme="always", split=False),
    ])
    backend.decoder = decoders.Metaspace(replacement=METASPACE, prepend_scheme="always")
    # Placeholders stay ordinary pieces (score 0, so Viterbi always keeps them whole): as added tokens they would
    # be cut out before the Metaspace step and lose the `▁` piece SentencePiece puts before them.
    _finish(backend, placeholders=False)
    return backend


def wordpiece_backend(vocab: list[str], preprocessing: str):
    """A BERT WordPiece `tokenizers.Tokenizer` for `vocab` (no lowercasing, no accent stripping)."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

    backend = Tokenizer(models.WordPiece({t: i for i, t in enumerate(vocab)}, unk_token="[UNK]",
                                         max_input_chars_per_word=100))
    # Arabic diacritics and hamza forms are letters to us, so accents are never stripped.
    backend.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=False,
                                                    lowercase=False)
    if preprocessing == "none":
        backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    else:
        backend.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.WhitespaceSplit(),
            pre_tokenizers.Split(Regex(PUNCTUATION_EXCEPT_PLUS), behavior="isolated"),
        ])
    # Decoding preprocessed text should give the preprocessed text back (then `unpreprocess`), not English spacing.
    backend.decoder = decoders.WordPiece(prefix="##", cleanup=preprocessing == "none")
    _finish(backend, placeholders=True)
    return backend


def _finish(backend, *, placeholders: bool) -> None:
    from tokenizers import AddedToken, processors

    vocab = backend.get_vocab()
    missing = [t for t in SPECIAL_TOKENS if t not in vocab]
    if missing:
        raise ConfigError(f"the vocabulary lacks the BERT special token(s) {' '.join(missing)}")
    backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    if placeholders:
        # Non-special, so decoding with skip_special_tokens keeps them; only those the vocabulary has (mBERT has none).
        backend.add_tokens([AddedToken(t, normalized=False) for t in PLACEHOLDERS if t in vocab])
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0",
        pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
    )


def wrap_fast(backend):
    """The transformers fast tokenizer around a `tokenizers.Tokenizer` built above."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]",
        mask_token="[MASK]", model_input_names=["input_ids", "token_type_ids", "attention_mask"],
        model_max_length=MODEL_MAX_LENGTH,
    )


def save_pretrained_tokenizer(tokenizer, directory: str | os.PathLike) -> None:
    """`tokenizer.save_pretrained(directory)` in a form that transformers 4 and 5 both load.

    transformers 5 writes its own class name ("TokenizersBackend"), which 4.x cannot resolve: both resolve
    `COMPATIBLE_TOKENIZER_CLASS` and then load tokenizer.json as it is (a model-specific class such as BertTokenizer
    would rebuild BERT's pre-tokenizer). What a model-specific class only implies, its model inputs (BERT's include
    token_type_ids, the generic class's default may not), is written out. transformers 5 also saves the truncation
    of the last call (QA windows: only_second, 256) into both files, where it would become the loaded tokenizer's
    default: a tokenizer is saved without it.
    """
    from tokenizers import Tokenizer

    directory = Path(directory)
    tokenizer.save_pretrained(str(directory))
    config_path = directory / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config["tokenizer_class"] = COMPATIBLE_TOKENIZER_CLASS
    config["model_input_names"] = list(tokenizer.model_input_names)
    for key in _CALL_STATE_KEYS:
        config.pop(key, None)
    config_path.write_text(json.dumps(config, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    tokenizer_path = directory / "tokenizer.json"
    backend = Tokenizer.from_file(str(tokenizer_path))
    if backend.truncation is not None or backend.padding is not None:
        backend.no_truncation()
        backend.no_padding()
        backend.save(str(tokenizer_path))


def save_tokenizer(backend, directory: str | os.PathLike, *, preprocessing: str, **metadata) -> None:
    """Write `backend` as a Hugging Face tokenizer directory with its `arabert_pipeline.json`."""
    directory = Path(directory)
    save_pretrained_tokenizer(wrap_fast(backend), directory)
    if backend.model.__class__.__name__ == "WordPiece":
        vocab = sorted(backend.get_vocab(with_added_tokens=False).items(), key=lambda item: item[1])
        (directory / VOCAB_FILE).write_text("".join(t + "\n" for t, _ in vocab), encoding="utf-8")
    write_metadata(directory, preprocessing=preprocessing, **metadata)


def read_vocab_file(path: str | os.PathLike) -> list[str]:
    """Tokens of a BERT `vocab.txt`, one per line; LF or CRLF, with or without a final newline."""
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise InputError(f"cannot read the vocabulary: {exc}", path=path) from exc
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 ({exc.reason} at byte {exc.start})", path=path) from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    tokens: list[str] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(lines, 1):
        token = line[:-1] if line.endswith("\r") else line
        if not token.strip():
            raise InputError("empty token", path=path, line=number)
        if token in seen:
            raise InputError(f"duplicate token {token!r} (first on line {seen[token]})", path=path, line=number)
        seen[token] = number
        tokens.append(token)
    if not tokens:
        raise InputError("the vocabulary is empty", path=path)
    return tokens


def fetch_vocab(source: str | os.PathLike) -> Path:
    """A local `vocab.txt`: `source` itself, or the `vocab.txt` of hub model `source` (needs the network)."""
    path = Path(source)
    if path.is_file():
        return path
    if path.exists():
        raise InputError("expected a vocab.txt file", path=path)
    name = str(source)
    if looks_like_local_path(name) or name.endswith(".txt"):
        raise InputError("no such file", path=path)
    try:
        from huggingface_hub import hf_hub_download

        return Path(hf_hub_download(name, VOCAB_FILE))
    except Exception as exc:  # offline, unknown repo, no vocab.txt: all mean "cannot use this source"
        raise ConfigError(
            f"{name!r} is neither a local file nor a hub model whose vocab.txt could be downloaded ({exc}). "
            "Offline, pass the path of a vocab.txt instead."
        ) from exc


@contextlib.contextmanager
def locked_output(output_dir: str | os.PathLike, inputs: Iterable[str | os.PathLike],
                  overwrite: bool) -> Iterator[None]:
    """Hold the output's lock, check it again under the lock (another run may have written it meanwhile), and clear
    what a killed run left beside it; atomic_directory then replaces it only once the new tokenizer is complete."""
    output_dir = Path(output_dir)
    with OutputLock(output_dir, TOKENIZER_OUTPUT.verb):
        claim_output_dir(output_dir, TOKENIZER_OUTPUT, inputs=inputs, overwrite=overwrite)
        remove_stale_temporaries(output_dir.parent, f".{output_dir.name}.*.tmp")
        yield


def import_vocab(source: str | os.PathLike, output_dir: str | os.PathLike, *, preprocessing: str,
                 overwrite: bool = False) -> Path:
    """Save an existing WordPiece vocabulary (a vocab.txt or a hub id) as a tokenizer directory of ours."""
    from ..artifacts.writes import atomic_directory

    local = [source] if Path(source).exists() else []
    claim_output_dir(output_dir, TOKENIZER_OUTPUT, inputs=local, overwrite=overwrite)
    vocab_path = fetch_vocab(source)
    backend = wordpiece_backend(read_vocab_file(vocab_path), preprocessing)
    with locked_output(output_dir, local, overwrite), atomic_directory(output_dir) as tmp:
        save_tokenizer(backend, tmp, preprocessing=preprocessing, model_type="wordpiece",
                       vocab_size=backend.get_vocab_size(), source=str(source))
    return Path(output_dir)
