"""The optimisation side of the engine: BERT's learning-rate schedule, AdamW with weight-decay exclusions and
layer-wise rates, and when bf16 autocast pays."""
from __future__ import annotations

import functools
import re
import time

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
    """Whether to run under bf16 autocast: "on"/"off" as told; "auto" on a GPU that supports it, and on a CPU only
    where a bf16 matrix product measures faster than fp32 (cpu_bf16_speedup)."""
    if setting != "auto":
        return setting == "on"
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    return device.type == "cpu" and cpu_bf16_speedup() >= BF16_MIN_SPEEDUP


# bf16 autocast also converts activations and keeps fp32 master weights: below this matmul speed-up it buys nothing.
BF16_MIN_SPEEDUP = 1.3


@functools.lru_cache(maxsize=1)
def cpu_bf16_speedup(size: int = 512, repeats: int = 8) -> float:
    """fp32 time / bf16 time of a size × size matrix product on this CPU with the current thread count, best of a few
    runs (about 0.1 s). Measured, not read from CPU flags: on AVX512-BF16/AMX CPUs bf16 ran 2-2.7x faster for a mini
    BERT, on AVX2-only CPUs 9-20x slower, and flags do not say which way a given build of oneDNN goes."""
    native = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
    if native is None or not native():  # no bf16 kernels at all: emulated, always slower
        return 0.0
    a = torch.randn(size, size)
    inputs = {dtype: a.to(dtype) for dtype in (torch.float32, torch.bfloat16)}
    for x in inputs.values():  # the first calls start the thread pool and pick the kernels
        torch.mm(x, x)
    best = dict.fromkeys(inputs, float("inf"))
    for _ in range(repeats):  # alternating, so a burst of load on the machine hits both alike
        for dtype, x in inputs.items():
            start = time.perf_counter()
            torch.mm(x, x)
            best[dtype] = min(best[dtype], time.perf_counter() - start)
    return best[torch.float32] / max(best[torch.bfloat16], 1e-9)


# Embedding parameters: BERT-likes keep them under `embeddings.`, XLNet has `transformer.word_embedding` (and the
# query stream's `mask_emb`) at its top level.
EMBEDDINGS = re.compile(r"\.embeddings\.|(^|\.)(word_embedding|mask_emb)(\.|$)")


def parameter_groups(module: torch.nn.Module, weight_decay: float, layer_lr_decay: float = 1.0,
                     layers: int | None = None) -> list[dict]:
    """AdamW groups: BERT's weight-decay exclusions (biases and LayerNorm weights: the parameters with < 2
    dimensions; and XLNet's per-head attention biases r_w_bias, r_r_bias, r_s_bias, 2-D but biases, which XLNet
    exempts too) and, with layer_lr_decay d < 1 (ELECTRA's fine-tuning recipe), layer-wise learning rates.

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
        if layer_lr_decay != 1.0 and layers is not None:  # (None with a decay was refused above)
            match = re.search(r"\.layer\.(\d+)\.", name)
            depth = layers - int(match.group(1)) if match else layers + 1 if EMBEDDINGS.search(name) else 0
        key = (layer_lr_decay**depth, 0.0 if parameter.ndim < 2 or name.endswith("_bias") else weight_decay)
        groups.setdefault(key, []).append(parameter)
    return [{"params": params, "lr_scale": scale, "weight_decay": decay}
            for (scale, decay), params in sorted(groups.items(), key=lambda item: (-item[0][0], -item[0][1]))]


def make_optimizer(groups: list[dict], lr: float) -> torch.optim.Optimizer:
    """BERT's AdamW (β = 0.9, 0.999; ε = 1e-6); on a GPU fused (one kernel for all parameters instead of hundreds of
    small ones a step). The engine trains on the GPU whenever torch sees one, and the parameters, still on the CPU
    here, move there before the first step."""
    fused = {"fused": True} if torch.cuda.is_available() else {}
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.999), eps=1e-6, **fused)
