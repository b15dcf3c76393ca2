"""Which model `Pipeline(model)` means and how it runs: a bundled name, a model dir or a hub id resolved (a shipped
task model's name refused with what answers with it), the backend chosen (ONNX Runtime for a dir with a model.onnx on
the CPU, else torch), the int8 default a model records, and the torch model loaded and quantized."""
from __future__ import annotations

import os
import re
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

from ..artifacts.models import SHIPPED_MODELS, looks_like_local_path
from ..errors import ConfigError
from ..finetuning.export import ONNX_FILE
from ..finetuning.runtime import has_onnx_graph
from .inputs import BACKENDS, BUNDLED_MODELS, DEFAULT_MODEL

if TYPE_CHECKING:
    import torch

    from ..qa.transformer.model import QAModel

_HUB_ID = re.compile(r"[\w.-]+(/[\w.-]+)?")


def bundled_model_dir(name: str) -> Path:
    """The directory of a model shipped in the package, or a ConfigError if this checkout does not have it."""
    from .inputs import MODELS_DIR  # read at call time: tests point it elsewhere

    directory = MODELS_DIR / BUNDLED_MODELS[name]
    if not (directory / "config.json").is_file():
        raise ConfigError(
            f"the default model {name!r} is not bundled in this checkout (expected a model dir at {directory}). "
            "Pass a QA model dir made by `arabert-pipeline finetune`, or a hub id with preprocessing=..."
        )
    return directory


def choose_backend(model: str | os.PathLike[str] | QAModel, device: str, backend: str = "auto") -> str:
    """"onnx" or "torch": the backend that `Pipeline(model, device=device, backend=backend)` runs."""
    from importlib.util import find_spec

    from ..qa.transformer.model import QAModel

    if backend not in BACKENDS:
        raise ConfigError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if isinstance(model, QAModel):  # a loaded model runs where it was loaded
        loaded = getattr(model, "backend", "torch")
        if backend not in ("auto", loaded):
            raise ConfigError(f"backend={backend!r}, but the QAModel given was loaded for {loaded}")
        return loaded
    if backend == "torch":
        return "torch"
    path = resolve_model(model)
    onnx_file = isinstance(path, Path) and has_onnx_graph(path)
    if backend == "auto":
        return "onnx" if onnx_file and device == "cpu" and find_spec("onnxruntime") is not None else "torch"
    if not onnx_file:
        raise ConfigError(f"backend='onnx': {path} has no {ONNX_FILE} (write one with `arabert-pipeline export-onnx "
                          "MODEL_DIR`)")
    if device != "cpu":
        raise ConfigError(f"backend='onnx' runs on the CPU, not on device {device!r}")
    if find_spec("onnxruntime") is None:
        raise ConfigError("backend='onnx' needs onnxruntime: pip install onnxruntime")
    return "onnx"


def resolve_model(model: object) -> Path | str:
    """The local model directory `model` names, or the hub id it is (anything else: a ConfigError)."""
    name = os.fspath(model) if isinstance(model, (str, os.PathLike)) else None
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"model must be a bundled name ({', '.join(BUNDLED_MODELS)}), a directory or a hub id, "
                          f"got {model!r}")
    if name in BUNDLED_MODELS:
        return bundled_model_dir(name)
    if name in SHIPPED_MODELS:  # a shipped task model asked to answer questions: not a hub id to retry for
        from .tasks import BUNDLED_TASK_MODELS, TASK_NAMES

        task = next(t for t, (kind, default) in TASK_NAMES.items() if kind == BUNDLED_TASK_MODELS[name])
        raise ConfigError(f"{name!r} is the shipped {task} model, not a question-answering one: "
                          f"Pipeline({name!r}) or task={task!r} answers with it; the QA model is "
                          f"{DEFAULT_MODEL!r}")
    if Path(name).expanduser().exists():
        path = Path(name).expanduser()
        if os.path.lexists(path / "config.json") and not (path / "config.json").is_file():
            raise ConfigError(f"{path / 'config.json'} is not a regular file")
        if not (path / "config.json").is_file():
            raise ConfigError(f"{path} is not a model directory (no config.json)")
        return path
    if _looks_like_path(name):
        raise ConfigError(f"model directory {name} does not exist")
    return name


def model_prefers_int8(model: object, backend: str) -> bool:
    """Whether `Pipeline(model, quantize=None)` runs int8 on the `backend` chosen for it: only a local model dir on the
    ONNX backend (always the CPU) whose metadata records `quantize_by_default: true` (the dev decision covers that
    backend's int8 graph, not torch's)."""
    from importlib.util import find_spec

    from ..artifacts.metadata import read_metadata

    if not isinstance(model, (str, os.PathLike)) or backend != "onnx":
        return False
    path = resolve_model(model)
    if read_metadata(path, missing_ok=True).get("quantize_by_default") is not True:
        return False
    if find_spec("onnx") is None:  # the quantizer needs it; without it the model still answers, in fp32
        warnings.warn(f"{path} answers in int8 by default, which needs the onnx package (pip install onnx): "
                      "answering in fp32", stacklevel=3)
        return False
    return True


def load_qa_model(model: str | os.PathLike[str], *, preprocessing: str | None, device: str) -> QAModel:
    """The torch QAModel `model` names: a local dir, or a hub id (a hub that cannot give it: one ConfigError)."""
    from ..qa.transformer.model import QAModel

    path = resolve_model(model)
    if isinstance(path, str):
        try:
            return QAModel.load(path, preprocessing=preprocessing, device=device)
        except (OSError, ConfigError) as exc:  # an unknown repo, no network, or a hub model that does not fit
            if isinstance(exc, ConfigError) and not isinstance(exc.__cause__, OSError):
                raise  # the hub gave the model; QAModel.load says why it cannot answer (no QA head, preprocessing)
            first_line = (str(exc).splitlines() or [""])[0]
            raise ConfigError(f"cannot load {path!r}: it is not a local directory and the hub did not provide a "
                              f"usable model ({type(exc).__name__}: {first_line})") from exc
    # A local directory never touches the network: transformers reads local files directly (a test blocks sockets).
    return QAModel.load(path, preprocessing=preprocessing, device=device)


def _looks_like_path(name: str) -> bool:
    """A hub id is "name" or "owner/name" of word characters, dots and dashes; anything else is meant as a path,
    and so is "a/b" with a local directory `a` (artifacts.models.looks_like_local_path)."""
    return looks_like_local_path(name) or not _HUB_ID.fullmatch(name)


def quantize_dynamic(model: torch.nn.Module) -> torch.nn.Module:
    """int8 weights for every nn.Linear (activations quantized on the fly): the standard CPU speed-up for BERT."""
    import torch

    with warnings.catch_warnings():
        # torch.ao.quantization is deprecated in favour of torchao, a further dependency; it still works in 2.x.
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", UserWarning)
        quantized: torch.nn.Module = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
    return quantized
