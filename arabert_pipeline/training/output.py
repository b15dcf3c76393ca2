"""The engine's output directory: claimed and locked before a run, emptied for --overwrite, cleaned of what a killed
save left behind, and the final model moved into it file by file (arabert_pipeline.json last: it marks a complete
model). `OutputRules` is a part of `Engine` (engine.py), which supplies `loop`, `output`, `output_kind`, `is_main`,
`world`, `accelerator`, `inputs()` and `export()`."""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from ..artifacts.metadata import METADATA_FILE
from ..artifacts.writes import follow_umask, naming_io_errors
from ..errors import ArabertPipelineError, ConfigError
from ..outputs import OutputLock, claim_output_dir, remove_own_entries, remove_stale_temporaries
from .checkpoints import CHECKPOINTS, quiet_transformers

if TYPE_CHECKING:
    from accelerate import Accelerator

    from ..outputs import OutputKind
    from .state import LoopSettings


class OutputRules:
    """The output directory's rules, for `Engine`."""

    if TYPE_CHECKING:  # what Engine supplies
        loop: LoopSettings
        output: Path
        output_lock: OutputLock | None
        is_main: bool
        world: int
        accelerator: Accelerator

        @property
        def output_kind(self) -> OutputKind: ...
        def inputs(self) -> list[str]: ...
        def export(self, directory: Path) -> None: ...

    def claim_output(self) -> OutputLock | None:
        """On the main process: lock OUT, check that this run may write it, empty an earlier run's for --overwrite
        and delete what a run killed during a save left half-written. Every process raises the main one's refusal."""
        loop, lock, refusal = self.loop, None, None
        if self.is_main:
            try:
                lock = OutputLock(self.output, self.output_kind.verb).acquire()
                earlier = claim_output_dir(self.output, self.output_kind, inputs=self.inputs(),
                                           overwrite=loop.overwrite, resume=loop.resume is not None)
                if earlier and loop.resume is None:
                    remove_own_entries(self.output, self.output_kind)
                remove_stale_temporaries(self.output / CHECKPOINTS, ".*.tmp")
                remove_stale_temporaries(self.output, ".*.tmp")
            except ArabertPipelineError as exc:
                if lock is not None:
                    lock.release()
                refusal = exc
        if self.world > 1:
            from accelerate.utils import broadcast_object_list

            message = broadcast_object_list([None if refusal is None else str(refusal)])[0]
            if message is not None and refusal is None:
                raise ConfigError(message)
        if refusal is not None:
            raise refusal
        return lock

    def release_output(self) -> None:
        if self.output_lock is not None:
            self.output_lock.release()

    def write_final_model(self) -> None:
        """Export into OUT itself, file by file (each move atomic): config.json, then arabert_pipeline.json last, so
        a partial directory neither loads nor counts as a finished model."""
        if self.is_main:
            tmp = Path(tempfile.mkdtemp(dir=self.output, prefix=".final.", suffix=".tmp"))
            try:
                with quiet_transformers(), naming_io_errors(self.output):
                    self.export(tmp)
                follow_umask(tmp)
                order = {"config.json": 1, METADATA_FILE: 2}
                for path in sorted(tmp.iterdir(), key=lambda p: (order.get(p.name, 0), p.name)):
                    path.replace(self.output / path.name)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        self.accelerator.wait_for_everyone()
