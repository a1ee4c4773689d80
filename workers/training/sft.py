"""One supervised fine-tuning (SFT) + LoRA run: TRL's SFTTrainer learns the dataset's answers.

``run_sft`` is ``run_grpo``'s sibling (a plain function; the rank process calls one or the
other by the job's method): the same model loading, LoRA settings and device rules, the same
observer (each step's record, checkpoints, stop and pause), and the adapter saved where
GRPO's is, so downloads, inference and a later job's ``init_from`` read it the same way.
Rows become examples with service.datasets.supervised, as the API checked them.

A step's record has its loss and learning rate, and in ``metrics`` what else TRL logged
(grad_norm, mean_token_accuracy, entropy, num_tokens); no completions and no reward. With a
validation set, the eval loss is measured after every ``eval_every`` steps and the last.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from typing import Any

import torch
from datasets import Dataset
from transformers import (
    PrinterCallback,
    TrainerControl,
    TrainerState,
    TrainingArguments,
)
from trl import SFTConfig, SFTTrainer

from service.base_models.built_in.tiny_model import resolve_base_model
from service.datasets.supervised import sft_examples
from service.jobs.hyperparameters import SFT_DEFAULTS
from workers.training import model_options
from workers.training.cuda import usable_cuda_devices
from workers.training.observer import TrainingObserver
from workers.training.spec import TrainingOutcome, TrainingSpec
from workers.training.step_records import StepRecord
from workers.training.trainer_common import (
    RunControl,
    StepLog,
    device_switch,
    evaluation_due,
    float_or_none,
    load_tokenizer,
    logged_metrics,
    shared_training_arguments,
    train_and_save,
)

logger = logging.getLogger(__name__)

# Log keys with a field of their own in StepRecord, or that say nothing about the step.
_OWN_FIELDS = frozenset({"loss", "learning_rate", "epoch"})
# What an evaluation's metrics keep (the rest are timings of the evaluation itself).
_EVAL_KEYS = ("eval_loss", "eval_mean_token_accuracy", "eval_entropy")


def run_sft(spec: TrainingSpec, observer: TrainingObserver) -> TrainingOutcome:
    """Train a LoRA adapter on ``spec.dataset``'s examples, reporting each step to ``observer``.

    Any exception from TRL or the observer ends the run by propagating. On resume, the steps
    after ``spec.resume_from_checkpoint`` are run (and reported) again.
    """
    trainer = build_sft_trainer(spec)
    reporter = SupervisedStepReporter(
        trainer=trainer,
        observer=observer,
        config_version=spec.reward_config.version,
        eval_every=spec.hyperparameters.eval_every,
    )
    hp = spec.hyperparameters
    logger.info(
        "SFT on %s: %d steps of %d examples (%d rows), resume from %s",
        spec.base_model,
        hp.train_steps,
        hp.batch_size or SFT_DEFAULTS["batch_size"],
        len(spec.dataset),
        spec.resume_from_checkpoint,
    )
    return train_and_save(spec, trainer, reporter)


def build_sft_trainer(spec: TrainingSpec) -> SFTTrainer:
    hp = spec.hyperparameters
    model_path = resolve_base_model(spec.base_model, spec.model_cache_dir)
    use_cuda = usable_cuda_devices() > 0
    use_bf16 = device_switch(hp.bf16, auto=use_cuda and torch.cuda.is_bf16_supported())
    tokenizer = load_tokenizer(model_path)
    # Before the model, as build_trainer does (the config sets torch.distributed up).
    args = sft_config(spec, use_cuda=use_cuda, use_bf16=use_bf16)
    model, lora = model_options.load_trained_model(
        hp, model_path, args, use_cuda=use_cuda, init_adapter=spec.init_adapter
    )
    trainer = SFTTrainer(
        model=model,
        args=args,
        train_dataset=Dataset.from_list(trained_examples(sft_examples(spec.dataset), tokenizer)),
        eval_dataset=(
            Dataset.from_list(
                trained_examples(sft_examples(spec.validation, what="validation row"), tokenizer)
            )
            if spec.validation
            else None
        ),
        processing_class=tokenizer,
        peft_config=lora,
    )
    # With tqdm off, transformers prints every log dict to stdout; the observer has them all.
    trainer.remove_callback(PrinterCallback)
    return trainer


def trained_examples(examples: list[dict[str, Any]], tokenizer: Any) -> list[dict[str, Any]]:
    """The examples as SFTTrainer takes them. Tool transcripts are tokenized here: TRL would
    train on a completion's tool results too (the model learns to write what only a tool can
    say), and its assistant-only mask needs generation markers Qwen-style templates lack."""
    if not any(_has_tool_results(example) for example in examples):
        return examples
    return [_assistant_turns_learned(example, tokenizer) for example in examples]


def _has_tool_results(example: dict[str, Any]) -> bool:
    messages = example.get("messages") or example.get("completion") or []
    return isinstance(messages, list) and any(m.get("role") == "tool" for m in messages)


def _assistant_turns_learned(example: dict[str, Any], tokenizer: Any) -> dict[str, Any]:
    """``input_ids`` and ``labels`` of one chat example, the labels on the assistant's turns
    after the prompt only (each turn's tokens after its generation prompt, as GRPO's rollouts
    generate them)."""
    tools = json.loads(example["tools"]) if example.get("tools") else None
    if "messages" in example:
        prompt: list[dict[str, Any]] = []
        turns = list(example["messages"])
    else:
        prompt, turns = list(example["prompt"]), list(example["completion"])

    def render(messages: list[dict[str, Any]], generation_prompt: bool) -> list[int]:
        ids = tokenizer.apply_chat_template(
            messages,
            tools=tools,
            add_generation_prompt=generation_prompt,
            tokenize=True,
            return_dict=False,
        )
        return list(ids)

    conversation = prompt + turns
    input_ids = render(conversation, False)
    labels = [-100] * len(input_ids)
    for index in range(len(prompt), len(conversation)):
        if conversation[index]["role"] != "assistant":
            continue
        start = render(conversation[:index], True)
        end = render(conversation[: index + 1], False)
        if input_ids[: len(end)] != end or end[: len(start)] != start:
            raise ValueError(
                "the chat template renders a tool transcript's turns differently from the "
                "whole conversation: it cannot be trained on turn by turn"
            )
        labels[len(start) : len(end)] = end[len(start) :]
    return {"input_ids": input_ids, "labels": labels}


def sft_config(spec: TrainingSpec, *, use_cuda: bool, use_bf16: bool) -> SFTConfig:
    hp = spec.hyperparameters
    batch_size = hp.batch_size or SFT_DEFAULTS["batch_size"]
    # torchrun says how many processes share the job; together they take one step's batch.
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if batch_size % world_size != 0:
        raise ValueError(
            f"batch_size {batch_size} cannot be split evenly over {world_size} processes"
        )
    return SFTConfig(
        per_device_train_batch_size=batch_size // world_size,
        per_device_eval_batch_size=batch_size // world_size,
        gradient_accumulation_steps=1,
        max_length=hp.max_length or SFT_DEFAULTS["max_length"],
        # Evaluated by the reporter (the eval loss rides on the step's record).
        eval_strategy="no",
        **shared_training_arguments(spec, use_cuda=use_cuda, use_bf16=use_bf16),
    )


class SupervisedStepReporter(RunControl):
    """Reports every SFT step (its loss and TRL's other metrics) and stops when asked."""

    def __init__(
        self,
        *,
        trainer: SFTTrainer,
        observer: TrainingObserver,
        config_version: int,
        eval_every: int | None,
    ) -> None:
        super().__init__(observer)
        self._trainer = trainer
        self._config_version = config_version
        # Evaluate after every eval_every-th step and the last; None with no validation set.
        self._evaluates = trainer.eval_dataset is not None
        self._eval_every = eval_every
        self._step_started = time.perf_counter()

    def on_step_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self._step_started = time.perf_counter()

    def on_step_logged(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, logs: StepLog
    ) -> None:
        duration = time.perf_counter() - self._step_started
        metrics = {
            key: value
            for key, value in logged_metrics(logs, _OWN_FIELDS).items()
            if math.isfinite(value)  # jsonb holds no NaN
        }
        if self._evaluation_due(state.global_step, args.max_steps):
            # On every rank: each evaluates its share of the validation examples.
            evaluated = self._trainer.evaluate()
            metrics.update(
                {
                    key: float(evaluated[key])
                    for key in _EVAL_KEYS
                    if key in evaluated and math.isfinite(evaluated[key])
                }
            )
        if self._ranks.is_main:
            self._observer.on_step(
                StepRecord(
                    step=state.global_step,
                    config_version=self._config_version,
                    reward_mean=None,
                    reward_std=None,
                    loss=float_or_none(logs.get("loss")),
                    kl=None,
                    learning_rate=float_or_none(logs.get("learning_rate")),
                    duration_s=duration,
                    functions={},
                    completions=[],
                    metrics=metrics,
                )
            )
        self.stop_if_asked(control)

    def _evaluation_due(self, step: int, last_step: int) -> bool:
        if not self._evaluates:
            return False
        return evaluation_due(step, last_step, self._eval_every)
