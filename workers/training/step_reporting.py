"""Reports each finished optimizer step as a StepRecord, and applies live reward config."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from transformers import TrainerControl, TrainerState, TrainingArguments

from sandbox.agent_api import AgentCodeError
from sandbox.api import RewardCodeError
from workers.training.agents.trajectories import agent_metrics
from workers.training.grpo_trainer import RecordingGRPOTrainer
from workers.training.observer import TrainingObserver
from workers.training.ranks import merge_generations
from workers.training.reward_dispatch import RewardDispatcher, ScoredGeneration, function_score
from workers.training.reward_stats import function_metrics, mean_and_std
from workers.training.step_records import CompletionRecord, StepRecord
from workers.training.trainer_common import RunControl, StepLog, float_or_none, logged_metrics

if TYPE_CHECKING:
    from workers.training.evaluation import Evaluator

logger = logging.getLogger(__name__)

# Log keys with a field of their own in StepRecord, or about reward, which we compute ourselves.
_OWN_FIELDS = frozenset({"loss", "kl", "learning_rate", "reward", "reward_std", "epoch"})


class StepReporter(RunControl):
    """Reports every step to the observer and stops training when the observer asks.

    Hooks and why they are the right ones (transformers' loop order): ``on_step_begin`` runs
    before the step's generation, so a config applied there scores that whole step;
    ``on_log`` (``on_step_logged``) runs after the optimizer step with that step's metrics
    (logging_steps=1) and before the checkpoint decision, so a stop request can still ask for a
    checkpoint.
    """

    def __init__(
        self,
        *,
        trainer: RecordingGRPOTrainer,
        dispatcher: RewardDispatcher,
        observer: TrainingObserver,
        num_generations: int,
        evaluator: Evaluator | None = None,
    ) -> None:
        super().__init__(observer)
        self._trainer = trainer
        # Validation after the steps it names; its result rides on that step's record.
        self._evaluator = evaluator
        self._dispatcher = dispatcher
        self._num_generations = num_generations
        self._step_started = time.perf_counter()
        self._rejected_versions: set[int] = set()

    def on_step_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self._step_started = time.perf_counter()
        update = self._observer.poll_reward_config(
            self._dispatcher.config.version, starting_step=state.global_step + 1
        )
        if (
            update is None
            or update.version == self._dispatcher.config.version
            or update.version in self._rejected_versions
        ):
            return
        in_force = self._dispatcher.config
        problem: str | None = None
        try:
            self._dispatcher.apply_config(update)
        except (RewardCodeError, AgentCodeError) as exc:
            problem = str(exc)
        if self._ranks.world_size > 1:
            # Every rank loads the version in its own sandbox; if one cannot, none uses it.
            problem = next((p for p in self._ranks.gather(problem) if p is not None), None)
            if problem is not None and self._dispatcher.config is not in_force:
                self._dispatcher.apply_config(in_force)
                self._trainer.use_agent_code()
        if problem is not None:
            # The API validated this code, but this worker cannot load it (e.g. a package the
            # API has): hours of training are worth more than the update. Keep the config in
            # force and say so; a later version is tried when it comes.
            self._rejected_versions.add(update.version)
            self._observer.on_config_rejected(update.version, problem)
            return
        if update.tools != in_force.tools or update.environments != in_force.environments:
            self._trainer.use_agent_code()
        self._trainer.set_sampling(temperature=update.temperature, top_p=update.top_p)

    def on_step_logged(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, logs: StepLog
    ) -> None:
        generation = self._dispatcher.last_generation
        if generation is None or generation.step != state.global_step:
            # Only possible if TRL reused a generation across optimizer steps, which run_grpo
            # never configures (steps_per_generation always equals gradient accumulation, so
            # each optimizer step generates once): better a missing record than a wrong one.
            logger.warning("step %d: no generation of its own to report", state.global_step)
            return
        advantages: list[float | None] = list(self._trainer.last_advantages or [])
        if self._ranks.world_size > 1:
            # Each rank scored its own slice; the record holds every rank's, each once.
            generation, advantages = merge_generations(self._ranks.gather((generation, advantages)))
        evaluate = self._evaluator is not None and self._evaluator.due(
            state.global_step, args.max_steps
        )
        evaluation = None
        if evaluate and self._evaluator is not None:
            # Every evaluated step is checkpointed, so the best by validation reward can be
            # downloaded (and resumed from).
            control.should_save = True
            # On every rank: each evaluates its share (and ZeRO-3 gathers weights together).
            evaluation = self._evaluator.evaluate(
                self._trainer, self._dispatcher, state.global_step, self._ranks
            )
        if self._ranks.is_main:
            record = self._build_record(state.global_step, generation, logs, advantages)
            record.evaluation = evaluation
            self._observer.on_step(record)
        self.stop_if_asked(control)

    def _build_record(
        self,
        step: int,
        generation: ScoredGeneration,
        logs: dict[str, Any],
        advantages: list[float | None],
    ) -> StepRecord:
        if len(advantages) != len(generation.completions):
            advantages = [None] * len(generation.completions)
        names = list(generation.weights)
        completions = [
            CompletionRecord(
                prompt_index=i // self._num_generations,
                group_position=i % self._num_generations,
                dataset_index=generation.dataset_indices[i],
                prompt=generation.prompts[i],
                completion=generation.completions[i],
                scores={name: function_score(generation.results, name, i) for name in names},
                total=generation.totals[i],
                advantage=advantages[i],
                token_count=generation.token_counts[i],
                trajectory=generation.trajectories[i] if generation.trajectories else None,
            )
            for i in range(len(generation.completions))
        ]
        functions = {}
        for name in names:
            result = generation.results.get(name)
            functions[name] = function_metrics(
                name,
                generation.versions[name],
                generation.weights[name],
                result.scores if result is not None else [],
                errors=result.failed_samples if result is not None else len(completions),
            )
        reward_mean, reward_std = mean_and_std(generation.totals)
        extra = {
            key: value
            for key, value in logged_metrics(logs, _OWN_FIELDS).items()
            # TRL's per-function keys would name our single dispatcher, not the user's functions.
            if not key.startswith("rewards/")
        }
        return StepRecord(
            step=step,
            config_version=generation.config_version,
            reward_mean=reward_mean,
            reward_std=reward_std,
            loss=float_or_none(logs.get("loss")),
            kl=float_or_none(logs.get("kl")),
            learning_rate=float_or_none(logs.get("learning_rate")),
            duration_s=time.perf_counter() - self._step_started,
            functions=functions,
            completions=completions,
            function_results=generation.results,
            extra_metrics=extra,
            agent_metrics=(
                agent_metrics(generation.trajectories)
                if generation.trajectories is not None
                else None
            ),
            async_generation=self._trainer.async_generation_record(step, logs),
        )
