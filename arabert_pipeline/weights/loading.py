"""A model dir's weights loaded in either storage (rows.py): `from_pretrained`, which every loader of the package goes
through (a model.safetensors in int8 rows widened to fp32; the header checked against config.json before anything is
built), the fp32 arrays of a weights file, and `write_plain`, a plain transformers checkpoint copy."""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from .header import SafetensorsHeader, check_storage, open_safetensors, read_safetensors_header
from .rows import EXACT_SUFFIX, INDEX_SUFFIX, SCALE_SUFFIX, check_int8_table, dequantize_table
from .shared_tokenizer import copy_tokenizer_json

if TYPE_CHECKING:
    import torch
    from numpy.typing import NDArray
    from transformers import PretrainedConfig, PreTrainedModel


def dequantized_arrays(path: str | os.PathLike[str]) -> dict[str, NDArray[Any]]:
    """{name: numpy array} of a safetensors file, int8 rows widened to fp32 and their scales dropped."""
    import numpy as np

    storage = check_storage(path, read_safetensors_header(path))
    with open_safetensors(path) as stored:
        tensors = {name: stored.get_tensor(name) for name in stored.keys()}  # noqa: SIM118  safe_open is no dict
    if storage is None:
        return tensors
    out = {}
    for name, values in tensors.items():
        if name.endswith((SCALE_SUFFIX, EXACT_SUFFIX, INDEX_SUFFIX)):
            continue
        scale = tensors.get(name + SCALE_SUFFIX)
        if scale is None and values.dtype != np.int8:  # int8 without scales would load as raw values: refused below
            out[name] = values
            continue
        exact, index = tensors.get(name + EXACT_SUFFIX), tensors.get(name + INDEX_SUFFIX)
        check_int8_table(path, name, values, scale, exact, index)
        assert scale is not None  # check_int8_table refuses a table without its scales
        out[name] = dequantize_table(values, scale, exact, index)
    return out


def dequantized_state_dict(path: str | os.PathLike[str]) -> dict[str, torch.Tensor]:
    """dequantized_arrays as torch tensors: the state dict a transformers model loads."""
    import torch

    return {name: torch.from_numpy(values.copy()) for name, values in dequantized_arrays(path).items()}


def check_fits_config(model_class: type[PreTrainedModel], config: PretrainedConfig, path: str | os.PathLike[str],
                      header: SafetensorsHeader) -> None:
    """Before the model is built: the sizes in `config` (config.json with the caller's settings) against the shapes in
    the header of the weights file PATH, a ConfigError naming the field that differs. Built first, the model of a
    config.json saying 200 layers (the weights hold 4) took 1.8 GB before the mismatch could be seen, and a
    vocab_size of 10⁹ would take more than any machine has. The layers are counted from the tensor names; every other
    size is compared by building the model on torch's meta device (shapes without memory) and comparing each tensor
    both hold. A file whose tensor names show no encoder layers is left to the checks after loading."""
    import copy
    import re

    import torch

    source = Path(path).parent / "config.json"
    stored: dict[str, tuple[int, ...]] = {}  # name → shape as loaded (int8 rows with exact rows: the whole table's)
    for name, entry in header.tensors.items():
        if not name.endswith((SCALE_SUFFIX, EXACT_SUFFIX, INDEX_SUFFIX)):
            index = header.tensors.get(name + INDEX_SUFFIX)
            dims = list(entry["shape"])
            stored[name] = tuple(index["shape"][:1] + dims[1:] if index is not None else dims)
    # An encoder's layers, as BERT, ELECTRA, DeBERTa (encoder.layer.N.) and XLNet (transformer.layer.N.) name them
    layers = {int(match.group(1)) for name in stored
              if (match := re.search(r"(?:^|\.)(?:encoder|transformer)\.layers?\.(\d+)\.", name))}
    declared = getattr(config, "num_hidden_layers", None)
    if not layers or type(declared) is not int:  # another architecture: building even on meta is not bounded
        return
    if declared != max(layers) + 1:
        raise ConfigError(f"{source}: num_hidden_layers is {declared}, but {path} holds {max(layers) + 1} layers")
    with torch.device("meta"):
        model = model_class(copy.deepcopy(config))
    expected = {name: tuple(tensor.shape) for name, tensor in model.state_dict().items()}
    # transformers loads a base model's weights into a task model and back: compare names without the base's prefix
    prefix = f"{getattr(model_class, 'base_model_prefix', '')}."
    stored = {name.removeprefix(prefix): shape for name, shape in stored.items()}
    for name, shape in expected.items():
        found = stored.get(name.removeprefix(prefix))
        if found is None or found == shape:
            continue
        same_rank = len(shape) == len(found)
        differing = [want for want, have in zip(shape, found, strict=True) if want != have] if same_rank else []
        fields = sorted(key for key, value in config.to_dict().items()
                        if type(value) is int and differing and value == differing[0])
        what = " or ".join(f"{field} {differing[0]}" for field in fields) + " does" if fields else "its sizes do"
        raise ConfigError(f"{source}: {what} not fit the weights: {name} is {found} in {path} but {shape} by "
                          "config.json")


def from_pretrained(model_class: Any, directory: str | os.PathLike[str], **kwargs: Any) -> Any:
    """`model_class.from_pretrained(directory, **kwargs)` (an Auto class or a concrete one), a model.safetensors in int8
    rows read widened to fp32: transformers cannot read that file itself (it refuses it, or with an int8 linear weight
    of the right shape would load the int8 values as they are). The file's header is checked first (check_storage,
    check_fits_config): nothing is built for weights that do not fit."""
    path = Path(directory) / "model.safetensors"
    if not path.is_file():  # a hub id, or weights in another form: transformers' own load says what is wrong
        return model_class.from_pretrained(os.fspath(directory), **kwargs)
    from transformers import AutoConfig

    header = read_safetensors_header(path)
    with open_safetensors(path):  # a header the library refuses, refused before anything is built
        pass
    compact = check_storage(path, header) is not None
    # Given a config object, transformers hands every keyword to the model's __init__; given a path, it first lets
    # the config take the ones it knows (a task's num_labels, id2label, label2id). Done here as it does: the config
    # keeps what it has an attribute for, except the loading settings that are config attributes too.
    config = AutoConfig.from_pretrained(os.fspath(directory))
    settings = {k: v for k, v in kwargs.items() if k not in LOADING_KWARGS and hasattr(config, k)}
    for key, value in settings.items():
        setattr(config, key, value)
    # the concrete class: an Auto class will not load from a state dict alone, nor build on the meta device
    try:
        concrete = model_class._model_mapping[type(config)] if hasattr(model_class, "_model_mapping") else model_class
    except KeyError:
        raise ConfigError(f"{Path(directory) / 'config.json'}: model_type {config.model_type!r} has no "
                          f"{model_class.__name__} form") from None
    check_fits_config(concrete, config, path, header)
    if not compact:
        return model_class.from_pretrained(os.fspath(directory), **kwargs)
    kwargs = {k: v for k, v in kwargs.items() if k not in settings}
    return concrete.from_pretrained(None, config=config, state_dict=dequantized_state_dict(path), **kwargs)


# from_pretrained's keywords that say how to load, not what the model is, though a config has an attribute of the name.
LOADING_KWARGS = frozenset({"dtype", "torch_dtype", "attn_implementation", "device_map", "output_loading_info",
                            "ignore_mismatched_sizes", "state_dict", "quantization_config"})


# What a plain transformers checkpoint copy of a model dir takes besides its weights.
PLAIN_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt",
               "sentencepiece.model")


def write_plain(model_dir: str | os.PathLike[str], output: str | os.PathLike[str]) -> Path:
    """OUTPUT: a plain transformers checkpoint of MODEL_DIR (fp32 model.safetensors, config and tokenizer files), for
    `AutoModel...from_pretrained(OUTPUT)` without this package. OUTPUT must be new or empty (the `weights` verb,
    finetuning/weightscli.py, gives it a directory it renames into place once complete)."""
    import shutil

    import numpy as np
    from safetensors.numpy import save_file

    model_dir, output = Path(model_dir), Path(output)
    if output.is_dir() and any(output.iterdir()):
        raise ConfigError(f"{output} is not empty: a plain copy is written to a new directory")
    output.mkdir(parents=True, exist_ok=True)
    arrays = dequantized_arrays(model_dir / "model.safetensors")
    save_file({k: np.ascontiguousarray(v, dtype=np.float32) for k, v in arrays.items()},
              os.fspath(output / "model.safetensors"), metadata={"format": "pt"})
    copy_tokenizer_json(model_dir, output)
    for name in PLAIN_FILES:
        if name != "tokenizer.json" and (model_dir / name).is_file():
            shutil.copyfile(model_dir / name, output / name)
    return output
