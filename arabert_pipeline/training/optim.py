"""The optimisation side of the engine: BERT's learning-rate schedule, AdamW with weight-decay exclusions and
layer-wise rates, and when bf16 autocast pays."""
from __future__ import annotations

import re

import torch

from ..errors import ConfigError


def lr_factor(step: int, warmup: int, total: int, decay_step: int = 0, decay_factor: float = 1.0) -> float:
    """BERT's schedule: linear warm-up to the peak, then linear decay to zero at `total`; after a --time-budget
    correction, linear decay from `decay_factor` at `decay_step` to zero at the corrected `total`.

    Written here rather than taken from transformers because with --time-budget the total is only known while
    training, and it must come back from a checkpoint; this way it is a few numbers in the state.
    """
    if step < warmup:
        return (step + 1) / warmup
    if decay_step > warmup:
        return max(0.0, decay_factor * (total - step) / max(1, total - decay_step))
    return max(0.0, (total - step) / max(1, total - warmup))


def warmup_steps(warmup: float, total: int) -> int:
    return min(total, int(round(warmup * total)) if warmup < 1 else int(warmup))


def use_bf16(setting: str, device: torch.device) -> bool:
    if setting != "auto":
        return setting == "on"
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    # Only with native bf16 (AVX512-BF16/AMX, or AVX512 that oneDNN handles well): on an AVX2-only CPU, bf16 autocast
    # measured 20× slower than fp32 for a mini BERT.
    native = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
    return device.type == "cpu" and native is not None and bool(native())


def parameter_groups(module: torch.nn.Module, weight_decay: float, layer_lr_decay: float = 1.0,
                     layers: int | None = None) -> list[dict]:
    """AdamW groups: BERT's weight-decay exclusions (biases and LayerNorm weights: the parameters with < 2
    dimensions) and, with layer_lr_decay d < 1 (ELECTRA's fine-tuning recipe), layer-wise learning rates.

    With d < 1, encoder layer i of `layers` trains at lr · d^(layers − i), the embeddings at lr · d^(layers + 1) and
    everything above the encoder (a task head) at lr: the layers that pretraining shaped most generally move least.
    Each group's "lr_scale" is its multiple of the scheduled learning rate.
    """
    if layer_lr_decay != 1.0 and layers is None:
        raise ConfigError("layer-wise learning rates need the model's number of layers")
    groups: dict[tuple[float, float], list] = {}
    for name, parameter in module.named_parameters():
        if not parameter.requires_grad:
            continue
        depth = 0
        if layer_lr_decay != 1.0:
            match = re.search(r"\.layer\.(\d+)\.", name)
            depth = layers - int(match.group(1)) if match else layers + 1 if ".embeddings." in name else 0
        key = (layer_lr_decay**depth, 0.0 if parameter.ndim < 2 else weight_decay)
        groups.setdefault(key, []).append(parameter)
    return [{"params": params, "lr_scale": scale, "weight_decay": decay}
            for (scale, decay), params in sorted(groups.items(), key=lambda item: (-item[0][0], -item[0][1]))]


def make_optimizer(groups: list[dict], lr: float) -> torch.optim.Optimizer:
    """BERT's AdamW (β = 0.9, 0.999; ε = 1e-6)."""
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.999), eps=1e-6)
