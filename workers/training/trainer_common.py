"""What the GRPO and SFT trainers share (as TRL keeps its trainers' shared parts in
``trainer/utils.py``): the tokenizer as both load it, the device switches, the run around the
trainer (callbacks, resume, the saved adapter), the stop/checkpoint callback under each method's
step reporter, and when an evaluation is due. Neither trainer imports the other's private parts.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from transformers import (
    AutoTokenizer,
    PreTrainedTokenizerBase,
    Trainer,
    TrainerCallback,
    TrainerControl,
    TrainerState,
    TrainingArguments,
)
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from service.artifacts.storage import OPTIMIZER_FILE
from workers.training.observer import TrainingObserver
from workers.training.ranks import RankGroup
from workers.training.spec import TrainingOutcome, TrainingSpec
from workers.training.starting_weights import StartingOptimizerState

# Where a run's adapter is saved in its output folder (downloads, inference, init_from read it).
ADAPTER_DIRNAME = "adapter"


def load_tokenizer(model_path: str) -> PreTrainedTokenizerBase:
    # Left padding and truncation as TRL sets them when it loads the tokenizer itself.
    tokenizer = AutoTokenizer.from_pretrained(
        model_path, padding_side="left", truncation_side="left"
    )
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def device_switch(setting: bool | str, *, auto: bool) -> bool:
    """A hyperparameter that is True, False, or "auto" (what this device supports)."""
    return auto if setting == "auto" else bool(setting)


def evaluation_due(step: int, last_step: int, every: int | None) -> bool:
    """Evaluate after every ``every``-th step (None: only the last) and always after the last."""
    return step >= last_step or (every is not None and step % every == 0)


def float_or_none(value: Any) -> float | None:
    """A logged number as a record holds it: NaN (a mean over nothing) is None."""
    if value is None:
        return None
    number = float(value)
    return None if math.isnan(number) else number


class RunControl(TrainerCallback):
    """What every method's reporter does around a step's record: ask the observer whether to
    stop (a paused run checkpoints at that step), and report each checkpoint once."""

    def __init__(self, observer: TrainingObserver) -> None:
        self._observer = observer
        self.stop_reason: str | None = None
        # With N processes: which rank this is (rank 0 records), and the collectives that keep
        # every rank on the same config and stop decision (see workers/training/ranks.py).
        self._ranks = RankGroup.current()

    def stop_if_asked(self, control: TrainerControl) -> None:
        """After the step's record: under N ranks the observer hands rank 0's answer to all."""
        reason = self._observer.should_stop()
        if reason is not None:
            # Kept even when this was the last step anyway: the caller must know the run was
            # stopped (a cancel that raced the end must not be reported as success).
            self.stop_reason = reason
            control.should_training_stop = True
            # A paused run resumes from its last checkpoint: make that this step.
            control.should_save = True

    def on_save(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        **kwargs: Any,
    ) -> None:
        if not self._ranks.is_main:
            return  # one checkpoint, reported once (the Trainer writes the adapter on rank 0)
        path = Path(str(args.output_dir)) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"
        self._observer.on_checkpoint(state.global_step, path)


def train_and_save(spec: TrainingSpec, trainer: Trainer, reporter: RunControl) -> TrainingOutcome:
    """Run ``trainer`` (GRPO's or SFT's, ``reporter`` among its callbacks) from the job's start
    or its checkpoint, then save what it trained where the worker collects it."""
    trainer.add_callback(reporter)
    if spec.init_optimizer and spec.resume_from_checkpoint is None:
        # A resume has its own optimizer state, in its checkpoint.
        assert spec.init_adapter is not None
        trainer.add_callback(StartingOptimizerState(spec.init_adapter / OPTIMIZER_FILE))

    resume = str(spec.resume_from_checkpoint) if spec.resume_from_checkpoint else None
    trainer.train(resume_from_checkpoint=resume)

    adapter_path = Path(spec.output_dir) / ADAPTER_DIRNAME
    # A PEFT model saves only the adapter (a whole model when every weight trained); the
    # tokenizer makes the folder loadable alone.
    trainer.save_model(str(adapter_path))
    return TrainingOutcome(
        steps_completed=trainer.state.global_step,
        stop_reason=reporter.stop_reason,
        adapter_path=adapter_path,
    )
