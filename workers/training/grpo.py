"""One GRPO + LoRA training run: TRL does the optimization, we feed rewards and report steps.

``run_grpo`` is a plain function (no Celery, no database): the worker wraps it, and tests call it
directly on the built-in tiny model.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import torch
from datasets import Dataset
from transformers import (
    PrinterCallback,
)
from trl import GRPOConfig

from sandbox.agent_api import AgentSandbox, conversational_prompt
from sandbox.api import RewardSandbox
from service.base_models.built_in.tiny_model import resolve_base_model
from service.jobs.hyperparameters import Hyperparameters
from workers.training import model_options
from workers.training.agents.session import AgentSession
from workers.training.async_generation import (
    AsyncRolloutTrainer,
    RolloutEngine,
    async_grpo_arguments,
    start_rollout_engine,
)
from workers.training.colocated_vllm_sizing import colocated_memory_plan
from workers.training.cuda import usable_cuda_devices
from workers.training.evaluation import Evaluator, ValidationSettings
from workers.training.generation import release_vllm
from workers.training.grpo_trainer import RecordingGRPOTrainer
from workers.training.kept_engine import EngineKeeper
from workers.training.observer import TrainingObserver
from workers.training.reward_dispatch import DATASET_INDEX_COLUMN, RewardDispatcher
from workers.training.reward_models import RewardModelScorer
from workers.training.spec import TrainingOutcome, TrainingSpec
from workers.training.starting_weights import (
    reference_in_adapter_dtype,
)
from workers.training.step_reporting import StepReporter
from workers.training.trainer_common import (
    device_switch,
    load_tokenizer,
    shared_training_arguments,
    train_and_save,
)

logger = logging.getLogger(__name__)


def run_grpo(
    spec: TrainingSpec,
    sandbox: RewardSandbox,
    observer: TrainingObserver,
    agent_sandbox: AgentSandbox | None = None,
    *,
    engines: EngineKeeper | None = None,
) -> TrainingOutcome:
    """Train a LoRA adapter with GRPO, scoring in ``sandbox``, reporting each step to ``observer``.

    Loads ``spec.reward_config`` into the sandbox first; the caller owns the sandbox and closes
    it. A config that cannot load (RewardCodeError, at start or from poll_reward_config), and
    any exception from TRL, the sandbox or the observer, ends the run by propagating.

    On resume, the steps after the checkpoint are run (and reported) again, with the config
    the caller passes in ``spec.reward_config``: give the one in force at the checkpoint.

    Agent jobs (tools or environments in the config) run that code in ``agent_sandbox``,
    which the caller also owns.

    ``engines``: the process's kept vLLM engine, when its owner (the worker's spare) keeps one
    from job to job; without it the run's engine is shut down at its end.
    """
    engines = engines if engines is not None else EngineKeeper()
    agents = None
    if is_agent_job(spec):
        if agent_sandbox is None:
            raise ValueError("this job has tools or environments: it needs an agent sandbox")
        agents = AgentSession(agent_sandbox, spec.dataset, DATASET_INDEX_COLUMN)
    dispatcher = RewardDispatcher(
        sandbox,
        spec.reward_config,
        spec.dataset,
        agents,
        reward_models=RewardModelScorer(spec.model_cache_dir),
    )
    dispatcher.load_initial()
    trainer = build_trainer(spec, dispatcher, engines)
    try:
        outcome = _train_and_save(spec, trainer, dispatcher, observer)
    except BaseException:
        # The run's own error is what the job reports: a release failing now is only logged.
        _release_generation(trainer)
        raise
    # Only now, after the save: under colocate (external_launcher) vLLM's shutdown destroys
    # the default process group, which is the trainer's own; FSDP and ZeRO-3 gather the
    # adapter's weights over it to save them. A one-process job's engine may stay for the
    # next job instead (kept_engine).
    engines.keep_or_release(trainer, _release_generation)
    return outcome


def _train_and_save(
    spec: TrainingSpec,
    trainer: RecordingGRPOTrainer,
    dispatcher: RewardDispatcher,
    observer: TrainingObserver,
) -> TrainingOutcome:
    logger.info(
        "GRPO on %s: %d steps, %d completions per step, generation: %s, resume from %s",
        spec.base_model,
        spec.hyperparameters.train_steps,
        spec.hyperparameters.completions_per_step,
        spec.generation.describe(),
        spec.resume_from_checkpoint,
    )
    hp = spec.hyperparameters
    reporter = StepReporter(
        trainer=trainer,
        dispatcher=dispatcher,
        observer=observer,
        num_generations=spec.hyperparameters.num_generations,
        evaluator=(
            Evaluator(spec.validation, ValidationSettings.from_hyperparameters(hp))
            if spec.validation
            else None
        ),
    )
    return train_and_save(spec, trainer, reporter)


def _release_generation(trainer: RecordingGRPOTrainer) -> None:
    """Shut vLLM down (engine, or the server's weight-sync channel) on every path, logging a
    failure rather than raising it: by now the run has its outcome (its adapter saved) or its
    own error, and either is what the job reports."""
    try:
        release_vllm(trainer)
    except Exception:
        logger.exception("could not release vLLM after the run (the run's outcome stands)")


def is_agent_job(spec: TrainingSpec) -> bool:
    """Whether the model may call tools in this job: fixed at creation (a config update may
    change the tools and environments, not add the first or drop the last)."""
    return bool(spec.reward_config.tools or spec.reward_config.environments)


def build_trainer(
    spec: TrainingSpec, dispatcher: RewardDispatcher, engines: EngineKeeper | None = None
) -> RecordingGRPOTrainer:
    """The TRL trainer for ``spec`` with ``dispatcher`` as its only reward function; its vLLM
    engine (if any) starts through ``engines`` (a kept one may serve it)."""
    hp = spec.hyperparameters
    model_path = resolve_base_model(spec.base_model, spec.model_cache_dir)
    use_cuda = usable_cuda_devices() > 0
    use_bf16 = use_cuda and torch.cuda.is_bf16_supported()
    if hp.async_generation is not None:
        # Its own process and engine; it starts while the trainer is built below.
        engine = start_rollout_engine(spec, model_path)
        try:
            return _build_trainer(
                spec, dispatcher, model_path, use_cuda, use_bf16, rollout_engine=engine
            )
        except BaseException:
            engine.close()
            raise
    if spec.generation.vllm_on_cpu:
        # Before the trainer starts vLLM: its CPU backend must keep weights TRL can sync.
        from workers.training.vllm_cpu import keep_plain_linear_weights

        keep_plain_linear_weights()
    if spec.generation.uses_vllm:
        # A colocated engine kept from this process's last job may serve this one (any other
        # vLLM job shuts it down first).
        with (engines or EngineKeeper()).routing_engine_starts():
            return _build_trainer(spec, dispatcher, model_path, use_cuda, use_bf16)
    return _build_trainer(spec, dispatcher, model_path, use_cuda, use_bf16)


def _build_trainer(
    spec: TrainingSpec,
    dispatcher: RewardDispatcher,
    model_path: str,
    use_cuda: bool,
    use_bf16: bool,
    rollout_engine: RolloutEngine | None = None,
) -> RecordingGRPOTrainer:
    hp = spec.hyperparameters
    tokenizer = load_tokenizer(model_path)
    use_bf16 = device_switch(hp.bf16, auto=use_bf16)
    # Before the model, as when TRL loads it itself: the config sets torch.distributed up, so
    # from_pretrained knows it loads for FSDP (transformers' is_fsdp_enabled, with
    # cpu_ram_efficient_loading: engines._fsdp). No effect under the other engines.
    args = _grpo_config(spec, use_cuda=use_cuda, use_bf16=use_bf16, model_path=model_path)
    model, lora = model_options.load_trained_model(
        hp, model_path, args, use_cuda=use_cuda, init_adapter=spec.init_adapter
    )
    trainer_class: type[RecordingGRPOTrainer] = RecordingGRPOTrainer
    async_options: dict[str, Any] = {}
    if rollout_engine is not None and hp.async_generation is not None:
        trainer_class = AsyncRolloutTrainer
        async_options = {
            "rollout_engine": rollout_engine,
            "max_staleness": hp.async_generation.max_staleness,
            "prompts_per_step": hp.prompts_per_step,
            # A rollout's sampling config: the live config's version when it was requested.
            "config_version": lambda: dispatcher.config.version,
        }
    trainer = trainer_class(
        model=model,
        reward_funcs=[dispatcher],
        args=args,
        train_dataset=_indexed_dataset(
            spec.dataset,
            conversational=dispatcher.agents is not None,
            environment_column=bool(
                dispatcher.agents is not None and len(spec.reward_config.environments) > 1
            ),
        ),
        processing_class=tokenizer,
        peft_config=lora,
        max_prompt_length=hp.max_prompt_length,
        stop_sequences=hp.stop,
        mask_truncated_completions=hp.mask_truncated_completions,
        reproducible_sampling=hp.reproducible_sampling,
        agent_session=dispatcher.agents,
        **async_options,
    )
    try:
        if spec.init_adapter is not None:
            reference_in_adapter_dtype(model)  # the trainer's own: TRL did not wrap it again
        # With tqdm off, transformers prints every log dict to stdout; the observer has them all.
        trainer.remove_callback(PrinterCallback)
        trainer.set_sampling(
            temperature=spec.reward_config.temperature, top_p=spec.reward_config.top_p
        )
    except BaseException:
        _release_generation(trainer)  # vLLM has started with the trainer
        raise
    return trainer


def _indexed_dataset(
    rows: list[dict[str, Any]], *, conversational: bool = False, environment_column: bool = False
) -> Dataset:
    """The prompts and each row's index; the reward dispatcher looks the rows up by index.

    Only the prompt goes through Arrow: the other columns reach reward functions exactly as
    uploaded (any types, any keys per row) from the rows themselves. Agent jobs need chat
    prompts (tools are rendered by the chat template): a text prompt becomes one user message.
    With several environments, each row's ``environment`` column picks its own (TRL reads it).
    """
    columns: dict[str, list[Any]] = {
        "prompt": [
            conversational_prompt(row["prompt"]) if conversational else row["prompt"]
            for row in rows
        ],
        DATASET_INDEX_COLUMN: list(range(len(rows))),
    }
    if environment_column:
        columns["environment"] = [str(row.get("environment", "")) for row in rows]
    return Dataset.from_dict(columns)


def per_rank_batches(hp: Hyperparameters, world_size: int) -> tuple[int, int]:
    """(micro-batch, accumulation steps) of each of ``world_size`` ranks, so that the ranks
    together generate exactly one step's completions: the same global batch, and so the same
    step, as one process (DDP averages the ranks' gradients)."""
    completions = hp.completions_per_step
    if completions % world_size != 0:
        raise ValueError(
            f"a step's {completions} completions (prompts_per_step x num_generations) cannot be "
            f"split evenly over {world_size} processes"
        )
    per_rank = completions // world_size
    micro = max(
        d for d in range(1, per_rank + 1) if per_rank % d == 0 and d <= hp.resolved_micro_batch_size
    )
    return micro, per_rank // micro


def _grpo_config(
    spec: TrainingSpec, *, use_cuda: bool, use_bf16: bool, model_path: str | None = None
) -> GRPOConfig:
    hp = spec.hyperparameters
    # torchrun says how many processes share the job; one process is a world of one.
    micro_batch, accumulation = per_rank_batches(hp, int(os.environ.get("WORLD_SIZE", "1")))
    return GRPOConfig(
        # One generation per optimizer step: the step's batch is exactly its completions, so
        # a step's record, config version and advantages all describe the same samples. The
        # backward pass runs on micro-batches of that one generation (gradient accumulation),
        # so a step's memory follows micro_batch_size, not the step's size.
        per_device_train_batch_size=micro_batch,
        gradient_accumulation_steps=accumulation,
        steps_per_generation=accumulation,
        num_iterations=1,
        num_generations=hp.num_generations,
        max_completion_length=hp.max_completion_length,
        temperature=hp.temperature,
        top_p=hp.top_p,
        beta=hp.beta,
        loss_type=hp.loss_type,
        epsilon=hp.epsilon,
        epsilon_high=hp.epsilon_high,
        scale_rewards=hp.scale_rewards,
        # With stop sequences the trainer masks truncated completions itself (TRL would take
        # a completion ended by a stop sequence for a truncated one).
        mask_truncated_completions=hp.mask_truncated_completions and not hp.stop,
        shuffle_dataset=True,
        # Extra dataset columns are reward inputs, not model inputs: keep them.
        remove_unused_columns=False,
        log_completions=False,
        max_tool_calling_iterations=hp.max_turns,
        **shared_training_arguments(spec, use_cuda=use_cuda, use_bf16=use_bf16),
        **(
            async_grpo_arguments()
            if hp.async_generation is not None
            else spec.generation.grpo_arguments(hp, colocated_memory_plan(spec, model_path))
        ),
    )
