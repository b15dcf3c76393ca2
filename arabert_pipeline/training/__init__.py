"""The one training engine of the package (engine.py, the loop; its parts in output.py, checkpoints.py, logs.py,
budget.py, schedule.py, loader.py, optim.py, state.py): `pretrain` (pretrain/trainer.py) and `finetune`
(qa/transformer/finetune.py) are two subclasses of `Engine`, so both run on one CPU, one GPU or several (accelerate /
torchrun), resume exactly, honour Ctrl-C and --time-budget, and write checkpoints, logs and the final model the same
way.

What the engine owns: the optimizer step (AdamW with BERT's weight-decay exclusions and optional layer-wise learning
rates, BERT's warm-up + linear decay, gradient clipping, accumulation, bf16 autocast where the hardware has it), the
step loop with its logs (OUT/log.jsonl, TensorBoard when installed), checkpoints (OUT/checkpoints/step-NNNNNNNN/:
`model/`, `state.pt` with tensors only, `trainer_state.json`; the last `keep_checkpoints` kept, anything else in
checkpoints/ left alone), resuming from them (both files checked field by field first), the output directory's lock
and rules, and the final export (arabert_pipeline.json moved in last: it marks a complete model). What a stage
supplies: `setup()` (data, model, optimizer groups, the plan's length), the micro-batches of an epoch and how to build
one, the forward, and optionally evaluation, per-step hooks and what the final model holds.

Hand-written rather than transformers.Trainer because the pretraining data plan (seeded per-epoch batch plans, masks
drawn per batch index) and the --time-budget re-planning need to own the step loop, and fine-tuning's evaluation is the
package's own QA decoding; accelerate supplies the distributed parts.
"""
from __future__ import annotations

from .budget import REPLAN_CHECK_EVERY, BudgetPlanner
from .checkpoints import (
    CHECKPOINT_MODEL,
    CHECKPOINTS,
    LOG_FILE,
    STATE_FILE,
    TRAINER_STATE_FILE,
    check_tensor_state,
    checkpoint_name,
    list_checkpoints,
    read_trainer_state,
)
from .engine import Engine, quiet_transformers
from .optim import lr_factor, make_optimizer, parameter_groups, use_bf16, warmup_steps
from .state import LoopSettings, TrainerState

__all__ = [
    "BudgetPlanner", "CHECKPOINTS", "CHECKPOINT_MODEL", "Engine", "LOG_FILE", "LoopSettings", "REPLAN_CHECK_EVERY",
    "STATE_FILE", "TRAINER_STATE_FILE", "TrainerState", "check_tensor_state", "checkpoint_name", "list_checkpoints",
    "lr_factor", "make_optimizer", "parameter_groups", "quiet_transformers", "read_trainer_state", "use_bf16",
    "warmup_steps",
]
