"""What a vocabulary says about the text it was made for, and hub tokenizers that split what their model saw whole.

AraBERT's hub repositories (aubmindlab/bert-base-arabertv2, ...) ship a BERT `vocab.txt` and a tokenizer_config.json
whose `never_split` lists the Farasa markers (`ال+`, `+ها`, ...) and the placeholders (`[رابط]`, ...). Their slow
BertTokenizer honoured it; the fast tokenizer `AutoTokenizer` builds (which QA needs for offsets) ignores it and
splits `ال+` into `ال` `+` and `[رابط]` into `[` `رابط` `]` (arabert issue #151): on ARCD-train 27.6% of the context
tokens became a bare `+` and none of the marker tokens the model was pretrained with was used. `keep_whole` gives such
a tokenizer the package's own rules (tokenizer/export.py: WordPiece on preprocessed text splits on whitespace and
punctuation except `+`, placeholders are added tokens), detected from the vocabulary, never from the model's name.
"""
from __future__ import annotations

import logging
from collections.abc import Iterable

from ..errors import ConfigError
from .export import METASPACE, PLACEHOLDERS, PUNCTUATION_EXCEPT_PLUS, segmentation_markers

log = logging.getLogger(__name__)


def vocabulary_markers(vocab: Iterable[str]) -> list[str]:
    """The Farasa segmentation markers a vocabulary holds as tokens (`ال+` in WordPiece, `▁ال+` in unigram)."""
    vocab = set(vocab)
    return [m for m in segmentation_markers() if m in vocab or METASPACE + m in vocab]


def expects_segmentation(vocab: Iterable[str]) -> bool:
    """True when the vocabulary was made from Farasa-segmented text: it holds most of the markers. A vocabulary of
    unsegmented text holds none (preprocessing puts spaces around every `+` it finds in raw text)."""
    return _most_markers(vocabulary_markers(vocab))


def _most_markers(found: list[str]) -> bool:
    return len(found) * 2 >= len(segmentation_markers())


def keep_whole(tokenizer, source: object = None) -> list[str]:
    """Make a fast WordPiece tokenizer keep the vocabulary's Farasa markers and placeholders whole, as the model saw
    them in pretraining; what was changed, in words (empty when nothing needed changing: mBERT, our own tokenizers),
    also logged at INFO naming `source`."""
    if not getattr(tokenizer, "is_fast", False):
        return []
    from tokenizers import AddedToken, Regex, pre_tokenizers

    backend = tokenizer.backend_tokenizer
    if type(backend.model).__name__ != "WordPiece":
        return []
    vocab = tokenizer.get_vocab()
    changes = []
    splitter = backend.pre_tokenizer
    if expects_segmentation(vocab) and splitter is not None and len(splitter.pre_tokenize_str("ال+")) > 1:
        backend.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.WhitespaceSplit(),
            pre_tokenizers.Split(Regex(PUNCTUATION_EXCEPT_PLUS), behavior="isolated"),
        ])
        changes.append(f"Farasa markers kept whole ({len(vocabulary_markers(vocab))} in the vocabulary, e.g. ال+ +ها)")
    split = [t for t in PLACEHOLDERS if t in vocab and tokenizer.tokenize(t) != [t]]
    if split:
        # Ids stay the vocabulary's: an added token already in the vocabulary keeps its id.
        tokenizer.add_tokens([AddedToken(t, normalized=False) for t in split])
        changes.append("placeholders kept whole (" + " ".join(split) + ")")
    for change in changes:
        log.info(f"{source or 'tokenizer'}: {change}, which its fast tokenizer split (arabert issue #151)")
    return changes


def check_preprocessing_fits(tokenizer, preprocessing: str, source: object) -> str | None:
    """Refuse unsegmented text for a vocabulary of Farasa-segmented text (its `+` tokens would never be used); a
    warning (returned) for segmented text and a vocabulary without any marker (every marker cut into pieces)."""
    from ..preprocess.preprocessor import SEGMENTED_NAMES, preprocessing_name

    markers = vocabulary_markers(tokenizer.get_vocab())
    segmented = preprocessing_name(preprocessing) in SEGMENTED_NAMES
    if not segmented and _most_markers(markers):
        raise ConfigError(
            f"{source}: its vocabulary holds {len(markers)} of the {len(segmentation_markers())} Farasa segmentation "
            f"markers ({' '.join(markers[:4])} ...), so the model was pretrained on Farasa-segmented text, which "
            f"preprocessing {preprocessing!r} does not produce: the marker tokens would never be used. Use "
            "--preprocessing arabertv2")
    if segmented and not markers:
        return (f"WARNING: {source}: its vocabulary holds none of the Farasa segmentation markers (ال+, +ها, ...), so "
                f"the model was not pretrained on segmented text; preprocessing {preprocessing!r} will cut every "
                "marker into pieces it never saw (arabertv02, or none for mBERT, is probably meant)")
    return None
