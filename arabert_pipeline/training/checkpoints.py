"""Checkpoints on disk: OUT/checkpoints/step-NNNNNNNN/{model/, state.pt, trainer_state.json}, how they are named and
found, and the checks a checkpoint passes before a run resumes from it (a damaged or foreign file is an error naming
the file and field, never a KeyError or a negative step); `Checkpointing`, the part of `Engine` (engine.py) that
finds, restores and saves them."""
from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import re
import shutil
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ..artifacts.models import describe_exception
from ..artifacts.reads import load_tensor_state, read_json_file
from ..artifacts.writes import atomic_directory
from ..errors import ConfigError, InputError
from .state import TrainerState

if TYPE_CHECKING:
    from accelerate import Accelerator

    from .budget import BudgetPlanner
    from .state import LoopSettings

CHECKPOINTS = "checkpoints"
LOG_FILE = "log.jsonl"
STATE_FILE = "state.pt"  # tensors only: model, optimizer, per-process RNG (read with weights_only=True)
TRAINER_STATE_FILE = "trainer_state.json"  # where the run is, and the settings it must be resumed with
CHECKPOINT_MODEL = "model"  # the checkpoint's Hugging Face model directory
CHECKPOINT_NAME = re.compile(r"step-([0-9]+)")  # ASCII digits: \d would also take "٣"


def checkpoint_name(step: object) -> str:
    """The directory name of the checkpoint at `step`; the only way the engine names one."""
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise ConfigError(f"a checkpoint needs a non-negative integer step, not {step!r}")
    return f"step-{step:08d}"


def list_checkpoints(output: Path) -> list[Path]:
    """The checkpoints in OUT/checkpoints, oldest first. Only `step-<digits>` directories holding a trainer state
    count: anything else there (a user's `step-best` or notes, fine-tuning's best.safetensors) is neither resumed
    from nor deleted by the rotation, which works on this list alone."""
    directory = output / CHECKPOINTS
    if not directory.is_dir():
        return []
    found = []
    for path in directory.iterdir():
        match = CHECKPOINT_NAME.fullmatch(path.name)
        if match and path.is_dir() and (path / TRAINER_STATE_FILE).is_file():
            found.append((int(match.group(1)), path.name, path))
    return [path for _, _, path in sorted(found)]


# trainer_state.json's fields and their JSON types. "extra" is optional: pretraining checkpoints written before the
# engine was shared with fine-tuning lack it.
TRAINER_STATE_FIELDS = {"state": dict, "config": dict, "data_key": str, "processes": int, "extra": dict}
OPTIONAL_TRAINER_STATE_FIELDS: dict[str, dict] = {"extra": {}}


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_amount(value: Any) -> bool:
    return _is_number(value) and math.isfinite(value) and value >= 0


def json_kind(value: Any) -> str:
    """A JSON value as an error message shows it: "5" (a string) and 5 read apart."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    return json.dumps(value, ensure_ascii=False)


def read_trainer_state(path: Path) -> dict[str, Any]:
    """A checkpoint's trainer_state.json, checked field by field before anything is resumed from it: an edited or
    foreign file would otherwise surface as a KeyError, or as a negative step that names the next checkpoint."""
    saved = read_json_file(path)
    unknown = sorted(set(saved) - set(TRAINER_STATE_FIELDS))
    if unknown:
        raise InputError(f"unknown field (fields: {', '.join(TRAINER_STATE_FIELDS)})", path=path, field=unknown[0])
    for name, kind in TRAINER_STATE_FIELDS.items():
        if name not in saved:
            if name not in OPTIONAL_TRAINER_STATE_FIELDS:
                raise InputError("missing", path=path, field=name)
            saved[name] = dict(OPTIONAL_TRAINER_STATE_FIELDS[name])
        elif not isinstance(saved[name], kind) or isinstance(saved[name], bool):
            wanted = {dict: "a JSON object", str: "a string", int: "an integer"}[kind]
            raise InputError(f"expected {wanted}, found {json_kind(saved[name])}", path=path, field=name)
    if saved["processes"] < 1:
        raise InputError(f"expected a positive number of processes, found {saved['processes']}", path=path,
                         field="processes")
    state, expected = saved["state"], {f.name: f.type for f in dataclasses.fields(TrainerState)}
    unknown = sorted(set(state) - set(expected))
    if unknown:
        raise InputError("unknown field", path=path, field=f"state.{unknown[0]}")
    for name, declared in expected.items():
        if name not in state:
            raise InputError("missing", path=path, field=f"state.{name}")
        value = state[name]
        if declared == "bool":
            valid, wanted = isinstance(value, bool), "true or false"
        elif declared == "int":
            valid, wanted = is_count(value), "a non-negative integer"
        else:
            valid, wanted = _is_amount(value), "a non-negative number"
        if not valid:
            raise InputError(f"expected {wanted}, found {json_kind(value)}", path=path, field=f"state.{name}")
    if state["step"] > state["total_steps"]:
        raise InputError(f"step {state['step']} is past the run's end (total_steps {state['total_steps']})",
                         path=path, field="state.step")
    return saved


def check_tensor_state(saved: Any, path: Path, processes: int) -> None:
    """The layout save_checkpoint writes into state.pt: {"model": tensors, "optimizer": an optimizer state dict,
    "processes": one {"torch", "window", "window_steps"[, "cuda"]} per process}."""
    if not isinstance(saved, dict):
        raise InputError(f"expected the saved model, optimizer and process states, found a {type(saved).__name__}",
                         path=path)
    # "objective": the key of pretraining checkpoints written before fine-tuning shared this engine.
    weights = saved.get("model", saved.get("objective"))
    if weights is None:
        raise InputError("missing", path=path, field="model")
    if not isinstance(weights, dict) or not all(torch.is_tensor(v) for v in weights.values()):
        raise InputError("expected a dict of tensors", path=path, field="model")
    optimizer = saved.get("optimizer")
    if optimizer is None:
        raise InputError("missing", path=path, field="optimizer")
    if not (isinstance(optimizer, dict) and isinstance(optimizer.get("state"), dict)
            and isinstance(optimizer.get("param_groups"), list)):
        raise InputError("expected an optimizer state dict (state, param_groups)", path=path, field="optimizer")
    states = saved.get("processes")
    if states is None:
        raise InputError("missing", path=path, field="processes")
    if not isinstance(states, list):
        raise InputError(f"expected a list of per-process states, found a {type(states).__name__}", path=path,
                         field="processes")
    if len(states) != processes:
        raise InputError(f"holds the states of {len(states)} processes, but the run has {processes}", path=path,
                         field="processes")
    for index, mine in enumerate(states):
        field = f"processes[{index}]"
        if not isinstance(mine, dict):
            raise InputError(f"expected a dict, found a {type(mine).__name__}", path=path, field=field)
        for key in ("torch", "window", "window_steps"):
            if key not in mine:
                raise InputError("missing", path=path, field=f"{field}.{key}")
        for key in ("torch", "cuda"):
            if key in mine and not (torch.is_tensor(mine[key]) and mine[key].dtype == torch.uint8):
                raise InputError("expected a random generator state (a uint8 tensor)", path=path,
                                 field=f"{field}.{key}")
        window = mine["window"]
        if not isinstance(window, dict) or not all(isinstance(k, str) and _is_number(v) for k, v in window.items()):
            raise InputError("expected a dict of metric sums", path=path, field=f"{field}.window")
        if not is_count(mine["window_steps"]):
            raise InputError(f"expected a non-negative integer, found {json_kind(mine['window_steps'])}", path=path,
                             field=f"{field}.window_steps")


class Checkpointing:
    """Finding, checking, restoring and saving checkpoints, for `Engine`, which supplies `loop`, `output`, `state`,
    `world`, `is_main`, `accelerator`, `model`, `optimizer`, `data_key`, the metric window and the stage's
    `config_record` / `config_differences` / `export_checkpoint` / `extra_state` / `restore_extra_state`."""

    if TYPE_CHECKING:  # what Engine supplies
        loop: LoopSettings
        output: Path
        state: TrainerState
        world: int
        is_main: bool
        accelerator: Accelerator
        optimizer: torch.optim.Optimizer
        data_key: str
        budget: BudgetPlanner | None
        budget_changed: bool
        last_saved_step: int
        resumed_state_file: Path | None
        _checkpoint_tensors: tuple[Path, Any] | None
        window: dict[str, torch.Tensor]
        window_steps: int

        def config_record(self) -> dict[str, Any]: ...
        def config_differences(self, stored: dict[str, Any]) -> list[str]: ...
        def export_checkpoint(self, directory: Path) -> None: ...
        def unwrapped(self) -> torch.nn.Module: ...
        def extra_state(self) -> dict[str, Any]: ...
        def restore_extra_state(self, extra: dict[str, Any]) -> None: ...

    def find_checkpoint(self) -> Path | None:
        """The checkpoint to resume from (its trainer state loaded), after checking that it fits this run."""
        resume = self.loop.resume
        if resume is None:  # claim_output has refused an earlier run's OUT, or emptied it (--overwrite)
            return None
        if resume == "latest":
            existing = list_checkpoints(self.output)
            if not existing:
                raise ConfigError(
                    f"{self.output} holds no checkpoint to resume (a finished model, or a run stopped before its first "
                    "checkpoint): pass --overwrite instead of --resume to start it again")
            checkpoint = existing[-1]
        else:
            checkpoint = Path(resume)
            if not (checkpoint / TRAINER_STATE_FILE).is_file():
                raise ConfigError(f"--resume {checkpoint}: not a checkpoint (no {TRAINER_STATE_FILE})")
        saved = read_trainer_state(checkpoint / TRAINER_STATE_FILE)
        stored_config = saved["config"]
        differences = self.config_differences(stored_config)
        if differences:
            current = self.config_record()
            detail = "; ".join(f"{k}: checkpoint {stored_config.get(k)!r}, now {current.get(k)!r}"
                               for k in differences)
            raise ConfigError(f"--resume {checkpoint} was written by a run with other settings ({detail})")
        if saved["data_key"] != self.data_key:
            raise ConfigError(f"--resume {checkpoint}: the training data or the tokenizer changed since the checkpoint "
                              "was written (their content hash differs)")
        if saved["processes"] != self.world:
            raise ConfigError(
                f"--resume {checkpoint} was written with {saved['processes']} processes, now {self.world}: "
                "launch with the same number to continue exactly"
            )
        # Read and checked now, before the stage spends time on its model and data; restore() applies it.
        tensors = load_tensor_state(checkpoint / STATE_FILE)
        check_tensor_state(tensors, checkpoint / STATE_FILE, self.world)
        self._checkpoint_tensors = (checkpoint, tensors)
        self.resumed_state_file = checkpoint / TRAINER_STATE_FILE
        self.state = TrainerState(**saved["state"])
        self.restore_extra_state(saved["extra"])
        self.last_saved_step = self.state.step
        # A budgeted run resumed with another --time-budget (extended, or cut short) moves the end of its decay to the
        # new budget at the first check, from the speed measured so far.
        self.budget_changed = self.budget is not None and stored_config.get("time_budget") != self.loop.time_budget
        return checkpoint

    def restore(self, checkpoint: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        """Model, optimizer and this process's RNG and unlogged metric sums from a checkpoint's state.pt."""
        path = checkpoint / STATE_FILE
        held, self._checkpoint_tensors = self._checkpoint_tensors, None
        if held is not None and held[0] == checkpoint:
            saved = held[1]
        else:
            saved = load_tensor_state(path)
            check_tensor_state(saved, path, self.world)
        # A file of the right layout can still hold another model's tensors or another optimizer's groups.
        try:
            model.load_state_dict(saved["model"] if "model" in saved else saved["objective"])
        except RuntimeError as exc:
            raise InputError(f"the weights do not fit this run's model ({describe_exception(exc)})", path=path,
                             field="model") from exc
        try:
            optimizer.load_state_dict(saved["optimizer"])
        except (ValueError, KeyError, TypeError, IndexError, RuntimeError) as exc:
            raise InputError(f"does not fit this run's optimizer ({describe_exception(exc)})", path=path,
                             field="optimizer") from exc
        mine = saved["processes"][self.accelerator.process_index]
        try:
            torch.set_rng_state(mine["torch"])
            if "cuda" in mine and torch.cuda.is_available():
                torch.cuda.set_rng_state(mine["cuda"])
        except RuntimeError as exc:
            raise InputError(f"not a random generator state ({describe_exception(exc)})", path=path,
                             field=f"processes[{self.accelerator.process_index}]") from exc
        self.window = {key: torch.tensor(value) for key, value in mine["window"].items()}
        self.window_steps = mine["window_steps"]

    def save_checkpoint(self) -> None:
        """Model (a loadable directory and the training state), optimizer, per-process RNG and the trainer state,
        written atomically; then only the last `keep_checkpoints` are kept."""
        from accelerate.utils import gather_object

        name = checkpoint_name(self.state.step)  # on every process, so that a bad step stops them all here
        mine = {"torch": torch.get_rng_state(), "window_steps": self.window_steps,
                "window": {key: float(value) for key, value in self.window.items()}}
        if torch.cuda.is_available():
            mine["cuda"] = torch.cuda.get_rng_state()
        process_states = gather_object([mine])
        if self.is_main:
            target = self.output / CHECKPOINTS / name
            with atomic_directory(target) as tmp:
                with quiet_transformers():
                    self.export_checkpoint(tmp / CHECKPOINT_MODEL)
                torch.save({"model": self.unwrapped().state_dict(), "optimizer": self.optimizer.state_dict(),
                            "processes": process_states}, tmp / STATE_FILE)
                trainer_state = {"state": asdict(self.state), "config": self.config_record(),
                                 "data_key": self.data_key, "processes": self.world, "extra": self.extra_state()}
                (tmp / TRAINER_STATE_FILE).write_text(json.dumps(trainer_state, indent=2), encoding="utf-8")
            for old in list_checkpoints(self.output)[: -self.loop.keep_checkpoints]:
                shutil.rmtree(old, ignore_errors=True)
        self.last_saved_step = self.state.step
        self.accelerator.wait_for_everyone()


@contextlib.contextmanager
def quiet_transformers():
    """No "Writing model shards" bar per save: it would break the training bar."""
    from transformers.utils import logging as hf_logging

    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if bars:
            hf_logging.enable_progress_bar()
