"""The engine's run log: OUT/log.jsonl (one JSON row per log interval and per evaluation; cut back to a checkpoint's
step when a run resumes from it, so that it reads as one run), TensorBoard when installed, and the peak memory a row
reports. `RunLog` is a part of `Engine` (engine.py), which supplies `output`, `state`, `is_main`, `accelerator`,
`evaluate()` and `health_warning()`."""
from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from ..artifacts.models import describe_exception
from ..artifacts.writes import atomic_write
from ..errors import InputError
from .checkpoints import LOG_FILE, is_count, json_kind

if TYPE_CHECKING:
    from accelerate import Accelerator

    from .state import TrainerState

log = logging.getLogger("arabert_pipeline.training")


class RunLog:
    """log.jsonl and TensorBoard, for `Engine`."""

    if TYPE_CHECKING:  # what Engine supplies
        output: Path
        state: TrainerState
        is_main: bool
        accelerator: Accelerator
        last_eval: dict[str, float]
        last_eval_step: int

        def evaluate(self) -> dict[str, float]: ...
        def health_warning(self, metrics: dict[str, float]) -> str | None: ...

    def evaluate_and_log(self, board) -> None:
        self.last_eval_step = self.state.step  # on every process, so that all take the same barriers
        if self.is_main:
            metrics = self.evaluate()
            self.last_eval = {"step": self.state.step, **metrics}
            warning = self.health_warning(metrics) if self.state.step > self.state.warmup_steps else None
            if warning:
                log.warning(f"warning at step {self.state.step}: {warning}")
            self.log({"step": self.state.step, "tokens": self.state.tokens, **metrics,
                      **({"warning": warning} if warning else {})}, board)
        self.accelerator.wait_for_everyone()

    def log(self, row: dict, board) -> None:
        if not self.is_main:
            return
        with open(self.output / LOG_FILE, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
        if board is not None:
            for key, value in row.items():
                if key not in ("step", "tokens") and isinstance(value, (int, float)):
                    board.add_scalar(key, value, row["step"])

    def truncate_log(self, step: int) -> None:
        """Drop rows written after the checkpoint being resumed, so the log reads as one run."""
        path = self.output / LOG_FILE
        if not path.exists():
            return
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(f"unreadable log ({describe_exception(exc)})", path=path) from exc
        lines = text.split("\n")
        if lines[-1]:  # a row torn by a run killed while writing it: never complete, so not part of the run
            lines[-1] = ""
        rows = []
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                logged = row["step"]
            except (ValueError, TypeError, KeyError) as exc:
                raise InputError(f"not a log row with a step ({describe_exception(exc)})", path=path,
                                 line=number) from exc
            if not is_count(logged):
                raise InputError(f"expected a non-negative integer, found {json_kind(logged)}", path=path, line=number,
                                 field="step")
            if logged <= step:
                rows.append(line)
        with atomic_write(path) as f:
            f.write("".join(line + "\n" for line in rows))

    def open_tensorboard(self):
        if not self.is_main:
            return None
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:  # TensorBoard is optional; log.jsonl has everything
            return None
        return SummaryWriter(str(self.output / "tensorboard"), purge_step=self.state.step + 1)


def peak_memory(device) -> dict[str, float]:
    """GiB at the high-water mark so far: the process's resident memory, and the CUDA allocator's on a GPU (the
    numbers a batch size is chosen by; host-side queries, no device sync)."""
    import resource

    peak = {"peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)}  # KiB on Linux
    if device.type == "cuda":
        peak["peak_cuda_gib"] = round(torch.cuda.max_memory_allocated(device) / 2**30, 2)
    return peak


# Dense bf16 tensor-core peaks (TFLOP/s, no sparsity) by the words of a device's name (CUDA names the card, e.g.
# "NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe"), the most specific first: what MFU divides by. A device not listed gets
# no MFU unless ARABERT_PIPELINE_PEAK_TFLOPS names its peak.
PEAK_TFLOPS = (("GH200", 989.0), ("H200", 989.0), ("H100 PCIe", 756.0), ("H100 NVL", 835.0), ("H100", 989.0),
               ("A100", 312.0), ("L40S", 362.0), ("L40", 181.0), ("L4", 121.0))


def peak_flops(device_name: str) -> float | None:
    """The device's dense bf16 peak in FLOP/s: ARABERT_PIPELINE_PEAK_TFLOPS if set, else from PEAK_TFLOPS."""
    override = os.environ.get("ARABERT_PIPELINE_PEAK_TFLOPS")
    if override:
        try:
            return float(override) * 1e12
        except ValueError:
            raise InputError(f"ARABERT_PIPELINE_PEAK_TFLOPS={override!r}: not a number") from None
    return next((tflops * 1e12 for name, tflops in PEAK_TFLOPS
                 if re.search(rf"(?<![\w-]){re.escape(name)}(?![^\W_])", device_name, re.IGNORECASE)), None)


def transformer_flops_per_token(non_embedding_parameters: int, layers: int, hidden: int, seq_length: int) -> float:
    """Training FLOPs per token of an encoder: 6 per non-embedding parameter (forward 2, backward 4) plus the
    attention scores and their use, 12 · layers · hidden · sequence length (PaLM's appendix B, as nanoGPT counts)."""
    return 6.0 * non_embedding_parameters + 12.0 * layers * hidden * seq_length


def model_flops_utilization(tokens_per_second: float, flops_per_token: float | None, device) -> dict[str, float]:
    """{"mfu": the fraction of the GPU's peak the run's tokens/s stands for}; empty where either is unknown."""
    if flops_per_token is None or device.type != "cuda":
        return {}
    peak = peak_flops(torch.cuda.get_device_name(device))
    return {"mfu": round(tokens_per_second * flops_per_token / peak, 4)} if peak else {}
