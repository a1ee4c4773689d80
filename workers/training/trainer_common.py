"""What the GRPO and SFT trainers share (as TRL keeps its trainers' shared parts in
``trainer/utils.py``): the tokenizer as both load it, the device switches, the run around the
trainer (callbacks, resume, the saved adapter), the stop/checkpoint callback under each method's
step reporter, and when an evaluation is due. Neither trainer imports the other's private parts.
"""

from __future__ import annotations

import math
from collections.abc import Collection
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
from workers.training import model_options
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


def shared_training_arguments(
    spec: TrainingSpec, *, use_cuda: bool, use_bf16: bool
) -> dict[str, Any]:
    """The TrainingArguments GRPO's and SFT's configs share (GRPOConfig and SFTConfig are
    both TrainingArguments): the schedule, the device, checkpoints and reporting."""
    hp = spec.hyperparameters
    return {
        "output_dir": str(spec.output_dir),
        "optim": model_options.optimizer_name(hp),
        "learning_rate": hp.learning_rate,
        "lr_scheduler_type": hp.lr_scheduler_type,
        # transformers 5 reads a warmup_steps below 1 as a share of max_steps.
        "warmup_steps": hp.warmup_ratio,
        "max_grad_norm": hp.max_grad_norm,
        "max_steps": hp.train_steps,
        "seed": hp.seed,
        "data_seed": hp.seed,
        # TRL's defaults target GPUs: bf16 and gradient checkpointing slow CPU down or fail,
        # so "auto" turns them on only with CUDA. (activation_checkpointing is transformers'
        # new name; it overrides TRL's default True.)
        "bf16": use_bf16,
        "fp16": False,
        "activation_checkpointing": device_switch(hp.activation_checkpointing, auto=use_cuda),
        "dataloader_pin_memory": use_cuda,
        # Without CUDA the ranks meet over gloo; without use_cpu each rank would train alone
        # (docs/measured-facts.md, "One job on several processes").
        "use_cpu": not use_cuda,
        "logging_steps": 1,
        "save_strategy": "steps",
        "save_steps": hp.checkpoint_every,
        "save_total_limit": spec.keep_checkpoints,
        # Optimizer and RNG state are needed to resume; the adapter is all the model we save.
        "save_only_model": False,
        # Trackers read their settings from the environment (docs/deploy/monitoring.md);
        # TensorBoard writes under output_dir/runs.
        "report_to": list(hp.report_to) or "none",
        "run_name": Path(spec.output_dir).name,  # the job id: the run's name in trackers
        "disable_tqdm": True,
        "dataloader_num_workers": 0,
    }


def evaluation_due(step: int, last_step: int, every: int | None) -> bool:
    """Evaluate after every ``every``-th step (None: only the last) and always after the last."""
    return step >= last_step or (every is not None and step % every == 0)


def float_or_none(value: Any) -> float | None:
    """A logged number as a record holds it: NaN (a mean over nothing) is None."""
    if value is None:
        return None
    number = float(value)
    return None if math.isnan(number) else number


# What the Trainer logs at a step: loss, learning_rate, and each method's own metrics.
StepLog = dict[str, Any]


def logged_metrics(logs: StepLog, own_fields: Collection[str]) -> dict[str, float]:
    """The numbers (not booleans) a step logged, as floats, less ``own_fields``: the keys a
    StepRecord has a field of its own for, or that its method leaves out."""
    return {
        key: float(value)
        for key, value in logs.items()
        if key not in own_fields and isinstance(value, int | float) and not isinstance(value, bool)
    }


class StepLogs(TrainerCallback):
    """Hands ``on_step_logged`` each optimizer step's log (both methods log every step). The
    end-of-training summary (train_loss, train_runtime) and an evaluation's own log carry no
    ``loss``: they are not steps."""

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if logs and "loss" in logs:
            self.on_step_logged(args, state, control, logs)

    def on_step_logged(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, logs: StepLog
    ) -> None:
        raise NotImplementedError


class RunControl(StepLogs):
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
