"""Micro-batches built ahead of the step that reads them, in worker processes (`--loader-workers`).

On a GPU the host's share of a step (packing, masking, whole-word grouping: NumPy and Python loops) otherwise sits on
the critical path: the GPU waits while the next batch is drawn. Here torch's DataLoader runs the stage's batch maker
in worker processes, a few steps ahead, and hands the batches over in pinned memory so that the copy to the device
does not block. What a batch holds does not change: the maker is the function the in-process path calls, and a
batch is a function of (seed, epoch, batch index), so a run with workers trains exactly as a run without them, and
resumes exactly.

The schedule of upcoming micro-batches is the engine's own (schedule.py `step_micro_batches`), walked ahead from the
current position; each batch comes back tagged with its (epoch, index), which the engine checks against the step
it runs.
"""
from __future__ import annotations

import dataclasses
import os
import signal
from collections.abc import Callable, Iterator

import numpy as np
import torch

# Micro-batches each worker keeps ready: enough to ride out a slow batch, few enough that pinned memory stays small.
PREFETCH_PER_WORKER = 4
# Workers "auto" starts on a GPU: the HF Trainer's input pipeline was measured fastest at about four (issue 51);
# never more than the cores left beside the training process.
AUTO_WORKERS = 4


class ScheduleDrift(Exception):
    """The loader's batch is not the one the step expects: a bug, never to be papered over with another batch."""


@dataclasses.dataclass(frozen=True)
class MicroBatch:
    epoch: int
    index: int  # position in the epoch's plan: the batch's random draws are a function of (seed, epoch, index)
    rows: np.ndarray


BatchMaker = Callable[[np.ndarray, int, int], dict]  # (rows, epoch, index) → CPU tensors


def loader_workers(setting: int | None, device: torch.device) -> int:
    """Worker processes for this training process: the number given, or (None) none on a CPU, where every core
    already trains and a worker would only take one from the model, and on a GPU AUTO_WORKERS, at most the cores this
    process may use (a scheduler's CPU set, not the machine's) shared among the training processes of the node, one
    left for the process itself."""
    if setting is not None:
        return setting
    if device.type != "cuda":
        return 0
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    per_process = cores // max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    return max(0, min(AUTO_WORKERS, per_process - 1))


class _Batches(torch.utils.data.Dataset):
    """The DataLoader's view of a maker: item `spec` is that micro-batch, tagged with its place in the schedule."""

    def __init__(self, make: BatchMaker):
        self.make = make

    def __getitem__(self, spec: MicroBatch):
        return spec.epoch, spec.index, self.make(spec.rows, spec.epoch, spec.index)


class Prefetcher:
    """Iterate to get (epoch, index, batch) for the micro-batches of `schedule`, in order, built by `workers`
    processes; `close()` stops them (also safe mid-schedule)."""

    def __init__(self, make: BatchMaker, schedule: Iterator[MicroBatch], workers: int, pin_memory: bool):
        self.loader = torch.utils.data.DataLoader(
            _Batches(make), sampler=schedule, batch_size=None, num_workers=workers, pin_memory=pin_memory,
            prefetch_factor=PREFETCH_PER_WORKER, persistent_workers=False,
            # The workers' seed drawn from a generator of their own: from torch's global one, starting the loader
            # would move the dropout masks of every step after it, so a run with workers would train differently.
            generator=torch.Generator().manual_seed(0),
            worker_init_fn=_start_worker,
        )
        self.batches: Iterator[tuple[int, int, dict]] = iter(self.loader)

    def next(self, epoch: int, index: int) -> dict:
        got_epoch, got_index, batch = next(self.batches)
        if (got_epoch, got_index) != (epoch, index):  # a schedule that drifted from the steps would train other data
            raise ScheduleDrift(f"the loader produced micro-batch {got_index} of epoch {got_epoch}, the step expects "
                               f"{index} of epoch {epoch}")
        return batch

    def close(self) -> None:
        shutdown = getattr(self.batches, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()
        self.batches = iter(())


def _start_worker(_worker_id: int) -> None:
    # Torch ops on one thread: the batch maker is NumPy, and threads would fight the trainer's.
    torch.set_num_threads(1)
    # Ctrl-C, and a cluster scheduler's SIGTERM, reach the whole process group: the trainer finishes its step and
    # saves a checkpoint, which needs the workers alive until it closes them. A second SIGTERM (the shutdown's own,
    # for a worker that did not stop when told) ends the worker.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda _signum, _frame: signal.signal(signal.SIGTERM, signal.SIG_DFL))
