"""The engine's batch schedule: which micro-batches each optimizer step reads, epoch after epoch (a stage's
`epoch_plan` per epoch; two plans kept while the loader walks into the next), and where they come from: made in this
process, or ahead of the step in --loader-workers processes (loader.py). `BatchSchedule` is a part of `Engine`
(engine.py), which supplies `loop`, `state`, `accelerator`, `batches_per_step`, `stop_signal`, the stage's
`epoch_plan`, `make_batch`, `count_tokens` and `batch_maker`, and `to_device`."""
from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from .loader import MicroBatch, Prefetcher, loader_workers

if TYPE_CHECKING:
    import numpy as np
    import torch
    from accelerate import Accelerator

    from .loader import BatchMaker
    from .state import LoopSettings, TrainerState


class BatchSchedule:
    """The micro-batches of each step and the loader that makes them ahead, for `Engine`."""

    if TYPE_CHECKING:  # what Engine supplies
        loop: LoopSettings
        state: TrainerState
        accelerator: Accelerator
        batches_per_step: int
        stop_signal: int | None
        _plans: dict[int, list[np.ndarray]]
        prefetcher: Prefetcher | None

        def epoch_plan(self, epoch: int) -> list[np.ndarray]: ...
        def make_batch(self, rows: np.ndarray, epoch: int, index: int) -> dict[str, torch.Tensor]: ...
        def count_tokens(self, rows: np.ndarray) -> int: ...
        def batch_maker(self) -> BatchMaker | None: ...
        def to_device(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]: ...

    def plan(self, epoch: int) -> list[np.ndarray]:
        if epoch not in self._plans:
            # Two kept: the loader walks into the next epoch while the steps finish this one.
            self._plans = {e: p for e, p in self._plans.items() if e == epoch - 1}
            self._plans[epoch] = self.epoch_plan(epoch)
        return self._plans[epoch]

    def steps_per_epoch(self) -> int:
        return len(self.plan(self.state.epoch)) // self.batches_per_step

    def epoch_ends_here(self) -> bool:
        """True right after the last step of an epoch (the next step would start the next one)."""
        return self.state.cursor + self.batches_per_step > len(self.plan(self.state.epoch))

    def step_micro_batches(self, epoch: int, cursor: int) -> tuple[int, int, list[MicroBatch]]:
        """The step after position (epoch, cursor): its epoch, its first batch in that epoch's plan, and this process's
        micro-batches. The run's one schedule: the steps follow it, and the loader walks it ahead."""
        if cursor + self.batches_per_step > len(self.plan(epoch)):
            epoch, cursor = epoch + 1, 0
        plan = self.plan(epoch)
        begin = cursor + self.accelerator.process_index * self.loop.grad_accum
        return epoch, cursor, [MicroBatch(epoch, i, plan[i]) for i in range(begin, begin + self.loop.grad_accum)]

    def next_step_batches(self) -> tuple[list[MicroBatch], int]:
        """This process's micro-batches for the next step, and the step's tokens (all processes')."""
        state = self.state
        state.epoch, start, micro_batches = self.step_micro_batches(state.epoch, state.cursor)
        state.cursor = start + self.batches_per_step
        plan = self.plan(state.epoch)
        return micro_batches, sum(self.count_tokens(plan[i]) for i in range(start, state.cursor))

    def upcoming_micro_batches(self) -> Iterator[MicroBatch]:
        """This process's micro-batches from the current position on, step after step, without end."""
        epoch, cursor = self.state.epoch, self.state.cursor
        while True:
            epoch, cursor, micro_batches = self.step_micro_batches(epoch, cursor)
            cursor += self.batches_per_step
            yield from micro_batches

    def start_loader(self) -> None:
        """Worker processes for the batches when --loader-workers (or "auto" on a GPU) asks and the stage can."""
        device = self.accelerator.device
        workers = loader_workers(self.loop.loader_workers, device)
        maker = self.batch_maker() if workers else None
        if maker is not None:
            self.prefetcher = Prefetcher(maker, self.upcoming_micro_batches(), workers, device.type == "cuda")

    def stop_loader(self) -> None:
        if self.prefetcher is not None:
            self.prefetcher.close()
            self.prefetcher = None

    def next_batch(self, micro_batch: MicroBatch) -> dict[str, torch.Tensor]:
        if self.prefetcher is not None:
            try:
                return self.to_device(self.prefetcher.next(micro_batch.epoch, micro_batch.index))
            except RuntimeError:  # ScheduleDrift is not one: a drifted schedule always stops the run
                # A worker ended by a signal to the whole process group (a second SIGTERM): the step that the engine
                # finishes before saving takes its batches here instead.
                if self.stop_signal is None:
                    raise
                self.stop_loader()
        return self.make_batch(micro_batch.rows, micro_batch.epoch, micro_batch.index)
