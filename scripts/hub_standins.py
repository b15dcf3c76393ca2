"""Offline stand-ins for the published checkpoints of the AraBERT paper's comparison, in a Hugging Face hub cache.

    python scripts/hub_standins.py --cache /tmp/hub --vocab ../shared/data/vocab [--size tiny|base] [--qa] [REPO_ID...]
    HF_HUB_CACHE=/tmp/hub HF_HUB_OFFLINE=1 arabert-pipeline finetune --model aubmindlab/bert-base-arabertv2 ...

Each stand-in is laid out as its hub repository is and loads through the same `from_pretrained` code path (repo id,
offline cache, snapshot): the real vocabulary, the real tokenizer files, the same weight format; only the weights are
random and, at --size tiny, the encoder is 2 layers of width 32 (the embedding matrix keeps the real vocabulary size).
At --size base it is BERT-base (12 layers, 768), for memory and speed measurements.

| repo id | vocabulary | files |
|---|---|---|
| aubmindlab/bert-base-arabertv2 | AraBERTv2's own (Farasa markers `ال+`, `+ها`, ...; CRLF) | pytorch_model.bin, vocab.txt, tokenizer_config.json with never_split (the markers and placeholders, as in the vocabulary's first lines), no tokenizer.json |
| aubmindlab/bert-base-arabert (v1) | AraBERTv2's (v1's is not available offline; both are Farasa-segmented) | as v2 |
| aubmindlab/bert-base-arabertv02, aubmindlab/bert-base-arabertv01 | AraELECTRA's unsegmented 64k (the closest available; mBERT's where it is absent) | as v2, never_split the placeholders |
| bert-base-multilingual-cased | mBERT's cased 119,547 | model.safetensors, tokenizer.json, tokenizer_config.json, vocab.txt |

The vocabularies come from the shared data (`vocab/`, see its README). Used by tests/test_paper_protocol.py and by
scripts/paper_table6.sh's dry run, which also takes its data from here (--data-slices): the paper protocol's sets under
their registry names, Arabic-SQuAD (not distributed with the shared data) stood in for by XQuAD-ar, which is SQuAD
translated into Arabic too (by professionals, where Arabic-SQuAD was machine-translated).
"""  # noqa: E501  the table's rows are Markdown rows, one line each
from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

ARABERTV2 = "aubmindlab/bert-base-arabertv2"
ARABERTV1 = "aubmindlab/bert-base-arabert"
ARABERTV02 = "aubmindlab/bert-base-arabertv02"
ARABERTV01 = "aubmindlab/bert-base-arabertv01"
MBERT = "bert-base-multilingual-cased"
SEGMENTED_VOCAB = "arabertv2-farasa-segmented-vocab.txt"
UNSEGMENTED_VOCABS = ("araelectra-base-discriminator-vocab.txt", "mbert-cased-vocab.txt")
MBERT_VOCAB = "mbert-cased-vocab.txt"
PLACEHOLDERS = ("[رابط]", "[بريد]", "[مستخدم]")
SIZES = {
    "tiny": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64),
    "base": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072),
}
REPO_IDS = (ARABERTV01, ARABERTV1, ARABERTV02, ARABERTV2, MBERT)


def vocabulary_file(repo_id: str, vocab_dir: Path) -> Path:
    if repo_id in (ARABERTV2, ARABERTV1):
        names = (SEGMENTED_VOCAB,)
    elif repo_id in (ARABERTV02, ARABERTV01):
        names = UNSEGMENTED_VOCABS
    elif repo_id == MBERT:
        names = (MBERT_VOCAB,)
    else:
        raise SystemExit(f"no stand-in for {repo_id}: use one of {', '.join(REPO_IDS)}")
    for name in names:
        if (vocab_dir / name).is_file():
            return vocab_dir / name
    raise SystemExit(f"{vocab_dir} has none of {', '.join(names)} (the shared data's vocab/ folder)")


def _tokens(path: Path) -> list[str]:
    text = path.read_bytes().decode("utf-8")
    return [line.removesuffix("\r") for line in text.split("\n") if line.removesuffix("\r")]


def _is_marker(token: str) -> bool:
    return token != "+" and (token.endswith("+") or token.startswith("+")) and not token.startswith("##")


def build_standin(cache: Path, repo_id: str, vocab_dir: Path, *, size: str = "tiny",
                  model_class: str = "BertForMaskedLM", seed: int = 0, like: str | None = None) -> Path:
    """Write the stand-in of `repo_id` into the hub cache `cache` (HF_HUB_CACHE), laid out as `like` (default:
    `repo_id` itself; another id for a checkpoint fine-tuned from it, e.g. a QA model); returns its snapshot
    directory."""
    import torch
    import transformers

    like = like or repo_id
    vocab_file = vocabulary_file(like, vocab_dir)
    tokens = _tokens(vocab_file)
    commit = hashlib.sha1(f"{repo_id} {size} {model_class} {seed}".encode()).hexdigest()
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True, exist_ok=True)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(commit)

    torch.manual_seed(int(commit[:8], 16) + seed)  # each stand-in its own weights
    config = transformers.BertConfig(vocab_size=len(tokens), max_position_embeddings=512, type_vocab_size=2,
                                     **SIZES[size])
    model = getattr(transformers, model_class)(config)
    config.architectures = [model_class]
    (snapshot / "config.json").write_text(config.to_json_string(), encoding="utf-8")
    (snapshot / "vocab.txt").write_bytes(vocab_file.read_bytes())  # byte for byte (AraBERT's is CRLF)
    specials = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]",
                "mask_token": "[MASK]"}
    (snapshot / "special_tokens_map.json").write_text(json.dumps(specials), encoding="utf-8")
    if like == MBERT:
        model.save_pretrained(snapshot)  # model.safetensors (its tied decoder saved once)
        (snapshot / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": False, "model_max_length": 512}),
                                                        encoding="utf-8")
        (snapshot / "tokenizer.json").write_text(_mbert_tokenizer_json(tokens), encoding="utf-8")
    else:
        torch.save(model.state_dict(), snapshot / "pytorch_model.bin")
        never_split = [t for t in tokens if _is_marker(t) or t in PLACEHOLDERS]
        (snapshot / "tokenizer_config.json").write_text(
            json.dumps({"do_lower_case": False, "max_len": 512, "never_split": never_split}, ensure_ascii=False),
            encoding="utf-8")
    return snapshot


def _mbert_tokenizer_json(tokens: list[str]) -> str:
    """tokenizer.json as transformers' BERT converter writes it for a cased vocabulary."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    backend = Tokenizer(models.WordPiece({t: i for i, t in enumerate(tokens)}, unk_token="[UNK]"))
    backend.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=None,
                                                    lowercase=False)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.decoder = decoders.WordPiece(prefix="##")
    ids = {t: i for i, t in enumerate(tokens)}
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0", pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
        special_tokens=[("[CLS]", ids["[CLS]"]), ("[SEP]", ids["[SEP]"])])
    from tokenizers import AddedToken

    backend.add_special_tokens([AddedToken(t, special=True, normalized=False)
                                for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")])
    return backend.to_str()


# registry file (qa/...) → the shared data's file it is cut from
DATA_SLICES = {"Arabic-SQuAD.json": "xquad.ar.json", "arcd-train.json": "arcd-train.json",
               "arcd-test.json": "arcd-test.json"}


def write_data_slices(shared: Path, target: Path, articles: int) -> None:
    """A data root (`target`/qa/) holding the first `articles` articles of each set of the paper's protocol."""
    (target / "qa").mkdir(parents=True, exist_ok=True)
    for name, source in DATA_SLICES.items():
        data = json.loads((shared / "qa" / source).read_text(encoding="utf-8"))
        data["data"] = data["data"][:articles]
        (target / "qa" / name).write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("repo_ids", nargs="*", metavar="REPO_ID", help=f"default: {' '.join(REPO_IDS)}")
    parser.add_argument("--cache", type=Path, help="the hub cache to write (HF_HUB_CACHE)")
    parser.add_argument("--vocab", type=Path, help="the shared data's vocab/ folder")
    parser.add_argument("--data-slices", nargs=3, metavar=("SHARED_DATA", "TARGET", "ARTICLES"),
                        help="instead: write the protocol's sets (the first ARTICLES articles of each) under TARGET/qa")
    parser.add_argument("--size", choices=sorted(SIZES), default="tiny")
    parser.add_argument("--like", metavar="REPO_ID", help="lay each stand-in out as this one (vocabulary, files)")
    parser.add_argument("--qa", action="store_true",
                        help="BertForQuestionAnswering (a fine-tuned QA checkpoint on the hub) instead of "
                             "BertForMaskedLM")
    args = parser.parse_args(argv)
    if args.data_slices:
        shared, target, articles = args.data_slices
        write_data_slices(Path(shared), Path(target), int(articles))
        return 0
    if args.cache is None or args.vocab is None:
        parser.error("--cache and --vocab are required to build stand-ins")
    for repo_id in args.repo_ids or REPO_IDS:
        snapshot = build_standin(args.cache, repo_id, args.vocab, size=args.size,
                                 model_class="BertForQuestionAnswering" if args.qa else "BertForMaskedLM",
                                 like=args.like)
        print(f"{repo_id}: {snapshot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
