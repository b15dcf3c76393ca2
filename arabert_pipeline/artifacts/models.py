"""Models: the ones shipped in the package and the names that mean them, a local path told from a hub id, a model
dir's config.json checked, Hugging Face models loaded with each way a directory can be broken a ConfigError, and the
torch device to run them on."""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ArabertPipelineError, ConfigError, InputError
from .reads import read_json_file

if TYPE_CHECKING:
    import torch

# The models shipped inside the package, by the names every verb and Pipeline accept → their folder there.
PACKAGED_MODELS_DIR = Path(__file__).resolve().parent.parent / "models"
SHIPPED_MODELS = {"arabert": "arabert-mini", "arabert-mini": "arabert-mini", "arabert-sentiment": "arabert-sentiment",
                  "arabert-ner": "arabert-ner"}


def shipped_model_dir(name: str | os.PathLike[str]) -> Path | None:
    """The folder in the package of the shipped model `name` names (arabert, arabert-mini, arabert-sentiment,
    arabert-ner), as Pipeline resolves it; None for any other name, or where a local path of that name exists."""
    name = os.fspath(name)
    if name not in SHIPPED_MODELS or Path(name).exists():
        return None
    return PACKAGED_MODELS_DIR / SHIPPED_MODELS[name]


def looks_like_local_path(name: str) -> bool:
    """Whether a model/tokenizer argument is meant as a local path rather than a hub id ("name" or "owner/name").

    A path form (leading `.`, `/` or `~`, more than one separator, a backslash) is local; so is "a/b" when `a` is a
    local directory: `runs/qa-smal` with a `runs/` beside it is a typo, not a hub repository to look up.
    """
    if name.startswith((".", "/", "~")) or "\\" in name or name.count("/") > 1:
        return True
    owner, sep, _ = name.partition("/")
    return bool(sep) and Path(owner).is_dir()


def check_local_source(source: str | os.PathLike[str], what: str = "model") -> None:
    """A `source` that looks like a local path must exist: fail at once instead of asking the hub for it."""
    name = os.fspath(source)
    if not Path(name).expanduser().exists() and looks_like_local_path(name):
        raise ConfigError(f"{what} directory {name} does not exist")


def describe_exception(exc: BaseException) -> str:
    """`Type: first line of the message`, for errors that wrap a library's exception."""
    return f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0]}"


# config.json fields that size the model: each must be a positive integer (a string "32000" or -1 layers would load
# a different model than the weights hold, or none at all).
SIZE_FIELDS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
               "max_position_embeddings", "type_vocab_size")


def model_config(directory: str | os.PathLike[str]) -> dict[str, Any]:
    """A model directory's config.json, with the fields that size the model checked."""
    path = Path(directory) / "config.json"
    if not os.path.lexists(path):
        raise ConfigError(f"{directory} is not a model directory (no config.json)")
    try:
        config = read_json_file(path)
    except InputError as exc:
        raise ConfigError(str(exc)) from exc
    for field in SIZE_FIELDS:
        value = config.get(field)
        # DeBERTa-v2 has no token types (0); an encoder of 0 layers (embeddings + head) is a model too
        low = 0 if field in ("type_vocab_size", "num_hidden_layers") else 1
        if field in config and (type(value) is not int or not low <= value <= 2**31):
            raise ConfigError(f"{path}: {field} must be an integer ≥ {low}, not {value!r}")
    return config


def load_pretrained_model(auto_class: Any, source: str | os.PathLike[str], **kwargs: Any) -> tuple[Any, dict[str, Any]]:
    """(model, loading info) from `auto_class.from_pretrained`, with each way a model directory can be broken (no or
    invalid config.json, truncated weights, weights of another shape than the config says) a ConfigError naming it."""
    path = Path(source)
    if path.is_dir():
        model_config(path)
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # its load report would print the mismatches raised below as a table first
    try:
        from ..weights.loading import from_pretrained  # int8 rows (issue 53) widened to fp32 there

        model, info = from_pretrained(auto_class, source, output_loading_info=True, ignore_mismatched_sizes=True,
                                      **kwargs)
    except ArabertPipelineError:  # weights/'s checks of the weights file name the file and field themselves
        raise
    except Exception as exc:  # safetensors, JSON, shape and I/O errors all mean "cannot load this"
        raise ConfigError(f"cannot load the model in {source} ({describe_exception(exc)})") from exc
    finally:
        hf_logging.set_verbosity(verbosity)
    mismatched = sorted(info.get("mismatched_keys") or (), key=lambda item: item[0])
    if mismatched:
        key, stored, expected = mismatched[0]
        more = f" ({len(mismatched) - 1} more tensors differ)" if len(mismatched) > 1 else ""
        raise ConfigError(f"{source}: the weights do not fit config.json: {key} is {tuple(stored)} in the weights "
                          f"but {tuple(expected)} by the config{more}")
    # The encoder must be the one the weights hold, tensor for tensor (a task head may be new or left out: a QA model
    # made from a pretrained MLM checkpoint). transformers only warns when config.json asks for fewer or more layers.
    prefix = f"{model.base_model_prefix}." if getattr(model, "base_model_prefix", "") else None
    for kind, where in (("unexpected_keys", "in the weights are unused by"), ("missing_keys", "are missing for")):
        keys = sorted(k for k in info.get(kind) or () if prefix and k.startswith(prefix) and ".pooler." not in k)
        if keys:
            more = f" and {len(keys) - 1} more" if len(keys) > 1 else ""
            raise ConfigError(f"{source}: the weights do not fit config.json: encoder tensors {where} the model it "
                              f"describes ({keys[0]}{more}); check num_hidden_layers and the other sizes in "
                              "config.json")
    return model, info


def check_vocabulary_size(model: Any, tokenizer: Any, source: object) -> None:
    """The tokenizer's ids index the model's embedding rows one to one: another size means another tokenizer."""
    rows = model.get_input_embeddings().num_embeddings
    if len(tokenizer) != rows:
        raise ConfigError(
            f"{source}: the tokenizer has {len(tokenizer)} tokens but the model has {rows} token embeddings; "
            "the tokenizer files do not belong to this model"
        )


def torch_device(name: object) -> torch.device:
    """A torch.device for `name` that exists on this machine, or a ConfigError saying what is available."""
    import torch

    try:
        device: torch.device = torch.device(name)  # type: ignore[call-overload]  # anything: its TypeError is the check
    except (RuntimeError, TypeError) as exc:
        raise ConfigError(f"device {name!r} is not a torch device (cpu, cuda, cuda:1, mps, ...)") from exc
    available = {"cpu": True, "cuda": torch.cuda.is_available(), "mps": torch.backends.mps.is_available()}
    if not available.get(device.type, False):
        raise ConfigError(f"device {name!r} is not available on this machine (torch {torch.__version__}); use cpu")
    # torch types index as an int; it is None for "cuda" without a number
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():  # type: ignore[redundant-expr]
        raise ConfigError(f"device {name!r}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    return device
