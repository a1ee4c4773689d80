"""Validation: the adapter as it stands after a step generates for held-out prompts, and the
job's current reward functions score what it wrote.

It runs inside the trainer's process, between the optimizer step and the step's record (see
StepReporter.on_log), so its result travels with that record to whoever stores steps.

Under N ranks every rank evaluates at the same step: each generates for its own share of the
prompts and scores it in its own sandbox, and the shares are gathered so that the record covers
the whole set once. Every rank must take part anyway: under DeepSpeed ZeRO-3 a rank holds only
a shard of the weights, and gathering them for generation is a collective.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from accelerate.utils import is_peft_model
from trl.models import unwrap_model_for_generation

from sandbox.agent_api import conversational_prompt
from sandbox.api import FunctionResult
from service.jobs.hyperparameters import Hyperparameters
from workers.training.agents.trajectories import agent_metrics
from workers.training.engines import FSDP_ENGINE
from workers.training.grpo_trainer import RecordingGRPOTrainer
from workers.training.ranks import RankGroup
from workers.training.reward_dispatch import (
    DATASET_INDEX_COLUMN,
    RewardDispatcher,
    function_score,
    score_samples,
)
from workers.training.reward_stats import function_metrics, mean_and_std
from workers.training.step_records import EvalRecord
from workers.training.trainer_common import evaluation_due

logger = logging.getLogger(__name__)

# Prompts generated for at once: enough to keep a GPU busy, few enough for a CPU's memory.
PROMPTS_PER_BATCH = 16


@dataclass(frozen=True)
class ScoredShare:
    """One rank's share of an evaluation: per function, each sample's score (None: none) and
    how many samples an error cost; each sample's weighted total."""

    scores: dict[str, list[float | None]]
    errors: dict[str, int]
    totals: list[float | None]
    trajectories: list[list[dict[str, Any]]] | None = None  # agent jobs: each rollout


@dataclass(frozen=True)
class ValidationSettings:
    every: int | None  # evaluate after every N-th step (and always after the last)
    samples_per_prompt: int
    max_prompts: int
    temperature: float  # 0: greedy
    max_completion_length: int
    stop: tuple[str, ...]
    seed: int

    @property
    def completions_per_prompt(self) -> int:
        # Greedy decoding writes the same completion every time: one is enough.
        return self.samples_per_prompt if self.temperature > 0 else 1

    @classmethod
    def from_hyperparameters(cls, hp: Hyperparameters) -> ValidationSettings:
        return cls(
            every=hp.eval_every,
            samples_per_prompt=hp.eval_samples,
            max_prompts=hp.eval_max_prompts,
            temperature=hp.eval_temperature,
            max_completion_length=hp.max_completion_length,
            stop=tuple(hp.stop),
            seed=hp.seed,
        )


class Evaluator:
    """Scores the current adapter on the validation rows when a step calls for it."""

    def __init__(self, rows: Sequence[dict[str, Any]], settings: ValidationSettings) -> None:
        if not rows:
            raise ValueError("validation: no rows to evaluate on")
        self.rows = list(rows[: settings.max_prompts])
        self.settings = settings

    def due(self, step: int, last_step: int) -> bool:
        return evaluation_due(step, last_step, self.settings.every)

    def evaluate(
        self,
        trainer: RecordingGRPOTrainer,
        dispatcher: RewardDispatcher,
        step: int,
        ranks: RankGroup | None = None,
    ) -> EvalRecord:
        """The whole validation set's record, on every rank. Under N ranks (``ranks``) every
        rank must call this at the same step (collectives); each evaluates its own share."""
        ranks = ranks or RankGroup(rank=0, world_size=1)
        started = time.perf_counter()
        share = self._share(ranks)
        config = dispatcher.config
        if dispatcher.agents is not None:
            scored = self._agent_share(trainer, dispatcher, share, ranks)
        else:
            scored = self._plain_share(trainer, dispatcher, share, step, ranks)
        sources = dispatcher.reward_sources()
        shares = ranks.gather(scored)
        totals = [total for part in shares for total in part.totals]
        functions = {}
        for name, weight, version in sources:
            functions[name] = function_metrics(
                name,
                version,
                weight,
                [score for part in shares for score in part.scores.get(name, [])],
                errors=sum(part.errors.get(name, 0) for part in shares),
            )
        reward_mean, reward_std = mean_and_std(totals)
        trajectories = [t for part in shares for t in part.trajectories or []]
        record = EvalRecord(
            step=step,
            config_version=config.version,
            reward_mean=reward_mean,
            reward_std=reward_std,
            prompts=len(self.rows),
            samples=len(totals),
            duration_s=time.perf_counter() - started,
            functions=functions,
            agent_metrics=agent_metrics(trajectories) if dispatcher.agents is not None else None,
        )
        if ranks.is_main:
            logger.info(
                "step %d: validation reward %s over %d samples on %d rank(s), generated by %s "
                "(%.1fs)",
                step,
                reward_mean,
                record.samples,
                ranks.world_size,
                "vllm (colocate)" if _colocated_vllm(trainer) is not None else "transformers",
                record.duration_s,
            )
        return record

    def _plain_share(
        self,
        trainer: RecordingGRPOTrainer,
        dispatcher: RewardDispatcher,
        share: list[dict[str, Any]],
        step: int,
        ranks: RankGroup,
    ) -> ScoredShare:
        """This rank's share generated here (plain completions), scored in the sandbox (and by
        the reward models)."""
        # Not an agent job: the sources are the reward functions and reward models.
        names = [name for name, _, _ in dispatcher.reward_sources()]
        prompts = [row["prompt"] for row in share]
        calls = lockstep_calls(_engine(trainer), len(self.rows), ranks.world_size)
        completions = self._generate(trainer, prompts, step, calls)
        repeats = self.settings.completions_per_prompt
        scored = ScoredShare(scores={name: [] for name in names}, errors={}, totals=[])
        if completions:  # a rank may get no prompt (fewer prompts than ranks)
            results, totals = score_samples(
                dispatcher,
                prompts=[prompt for prompt in prompts for _ in range(repeats)],
                completions=completions,
                examples=[row for row in share for _ in range(repeats)],
                step=step,
            )
            scored = ScoredShare(
                scores={
                    name: [function_score(results, name, i) for i in range(len(completions))]
                    for name in names
                },
                errors={
                    name: (results[name].failed_samples if name in results else len(completions))
                    for name in names
                },
                totals=totals,
            )
        return scored

    def _agent_share(
        self,
        trainer: RecordingGRPOTrainer,
        dispatcher: RewardDispatcher,
        share: list[dict[str, Any]],
        ranks: RankGroup,
    ) -> ScoredShare:
        """This rank's share as agent rollouts: TRL's own generate-and-score (the tool loop,
        the environments' resets, the rewards), in eval mode, on the validation rows. It samples
        as training does (eval_temperature does not apply), eval_samples rollouts a prompt.

        Every rank must call it with as many rows (TRL gathers the rewards of a batch over
        the ranks): a shorter share is padded with copies of a row, whose results are dropped.
        """
        repeats = self.settings.samples_per_prompt
        width = -(-len(self.rows) // ranks.world_size)
        padded = share + [share[0] if share else self.rows[0]] * (width - len(share))
        inputs = [
            {"prompt": prompt, DATASET_INDEX_COLUMN: index}
            | ({"environment": row.get("environment")} if "environment" in row else {})
            for index, row in enumerate(padded)
            for prompt in [conversational_prompt(row["prompt"])]
            for _ in range(repeats)
        ]
        kept = len(share) * repeats
        saved = (dispatcher.last_generation, trainer.last_advantages, trainer.num_generations_eval)
        model = trainer.model
        assert model is not None
        was_training = model.training
        trainer.num_generations_eval = repeats
        model.eval()
        try:
            with dispatcher.scoring_rows(padded), torch.no_grad():
                trainer._generate_and_score_completions(inputs)
            generation = dispatcher.last_generation
        finally:
            dispatcher.last_generation, trainer.last_advantages = saved[0], saved[1]
            trainer.num_generations_eval = saved[2]
            if was_training:
                model.train()
        assert generation is not None
        names = list(generation.weights)
        return ScoredShare(
            scores={
                name: [function_score(generation.results, name, i) for i in range(kept)]
                for name in names
            },
            errors={name: _failed_among(generation.results.get(name), kept) for name in names},
            totals=generation.totals[:kept],
            trajectories=(generation.trajectories or [])[:kept],
        )

    def _share(self, ranks: RankGroup) -> list[dict[str, Any]]:
        """This rank's rows: a contiguous slice, so that the ranks' shares in rank order are
        the set in its order (sizes differ by at most one)."""
        count = len(self.rows)
        start = ranks.rank * count // ranks.world_size
        end = (ranks.rank + 1) * count // ranks.world_size
        return self.rows[start:end]

    def _generate(
        self, trainer: RecordingGRPOTrainer, prompts: list[Any], step: int, calls: int = 0
    ) -> list[str]:
        """Each prompt's completions (completions_per_prompt of them, consecutive), as text;
        at least ``calls`` calls to generate() (the extra ones' output discarded).

        The unwrapped model, in eval mode (no dropout), without gradients. Under ZeRO-3 every
        rank gathers the whole weights first (a collective, even for a rank without prompts),
        as TRL does for training's generation; then each rank generates alone (no DDP
        collectives). Sampled evaluations draw from a forked RNG seeded by the step, so a run
        with validation trains exactly as one without.
        """
        if _colocated_vllm(trainer) is not None:
            # No filler calls: under FSDP only the weight sync is a collective (below).
            return self._generate_with_vllm(trainer, prompts, step)
        # Turned back on as training set it (TrainingArguments parses a JSON string to a dict).
        checkpointing = trainer.args.gradient_checkpointing_kwargs
        if not isinstance(checkpointing, dict):
            checkpointing = None
        with unwrap_model_for_generation(
            trainer.model_wrapped, trainer.accelerator, gradient_checkpointing_kwargs=checkpointing
        ) as model:
            if not prompts and not calls:
                return []
            return self._generate_with(model, trainer, prompts, step, calls)

    def _generate_with(
        self,
        model: Any,
        trainer: RecordingGRPOTrainer,
        prompts: list[Any],
        step: int,
        calls: int = 0,
    ) -> list[str]:
        settings = self.settings
        tokenizer: Any = trainer.processing_class
        pad_id = tokenizer.pad_token_id
        device = next(model.parameters()).device
        sampled = settings.temperature > 0
        was_training = model.training
        model.eval()
        texts: list[str] = []
        try:
            devices = [device] if device.type == "cuda" else []
            with torch.no_grad(), torch.random.fork_rng(devices=devices):
                torch.manual_seed(settings.seed + step)
                batches = [
                    prompts[start : start + PROMPTS_PER_BATCH]
                    for start in range(0, len(prompts), PROMPTS_PER_BATCH)
                ]
                real = len(batches)
                # Fillers come after this rank's own prompts: their draws change none of its
                # completions.
                batches += [[self.rows[0]["prompt"]]] * max(0, calls - real)
                for index, batch in enumerate(batches):
                    # As training tokenizes them (chat template, prompt truncation); one at a
                    # time, as a set may mix plain and chat prompts, which TRL tokenizes apart.
                    prompt_ids = [trainer._tokenize_prompts([p])[0][0] for p in batch]
                    width = max(len(ids) for ids in prompt_ids)
                    input_ids = torch.tensor(
                        [[pad_id] * (width - len(ids)) + list(ids) for ids in prompt_ids],
                        device=device,
                    )
                    attention_mask = torch.tensor(
                        [[0] * (width - len(ids)) + [1] * len(ids) for ids in prompt_ids],
                        device=device,
                    )
                    output = model.generate(
                        input_ids=input_ids,
                        attention_mask=attention_mask,
                        max_new_tokens=settings.max_completion_length,
                        do_sample=sampled,
                        **({"temperature": settings.temperature, "top_p": 1.0} if sampled else {}),
                        num_return_sequences=settings.completions_per_prompt,
                        pad_token_id=pad_id,
                        use_cache=True,
                        # transformers syncs ranks at every token under ZeRO-3 (and FSDP): here
                        # ZeRO-3's weights are already whole, and ranks with different shares
                        # make different calls, so a rank would wait on one that has finished.
                        # FSDP keeps the lockstep it needs (the filler calls above).
                        synced_gpus=None if _is_fsdp(trainer) else False,
                    )
                    if index >= real:
                        continue  # a filler: kept this rank in step with the others
                    for ids in output[:, width:].tolist():
                        texts.append(self._cut_at_stop(trainer._decode(ids)))
        finally:
            if was_training:
                model.train()
        return texts

    def _generate_with_vllm(
        self, trainer: RecordingGRPOTrainer, prompts: list[Any], step: int
    ) -> list[str]:
        """As ``_generate``, by the job's colocated vLLM engine (TRL's ``vllm_generation.llm``),
        which generates training's completions too.

        The engine first gets the adapter as it stands after the step: TRL's weight sync
        (the LoRA merged into the base weights), on every rank, since gathering ZeRO-3 or FSDP
        shards for it is a collective. TRL then finds the weights current at the next step's
        generation (``_last_loaded_step``) and does not sync them again. Each rank generates
        its own share in one call (vLLM's engine has no collectives of its own at tensor
        parallel size 1; with several, the group's prompts are generated together, as TRL
        does). A sampled evaluation draws from generators seeded by the step (each of a
        prompt's samples its own: vLLM seeds sample i with seed + i), not from the engine's,
        so a run with validation trains as one without.
        """
        settings = self.settings
        generation: Any = trainer.vllm_generation
        _sync_vllm_weights(trainer)
        prompt_ids = [list(trainer._tokenize_prompts([p])[0][0]) for p in prompts]
        group_ids, mine = _gather_tensor_parallel(generation, prompt_ids)
        if not group_ids:
            return []
        sampled = settings.temperature > 0
        params = _sampling_params(
            n=settings.completions_per_prompt,
            temperature=settings.temperature if sampled else 0.0,
            top_p=1.0,
            max_tokens=settings.max_completion_length,
            # vLLM stops at them itself; the text is cut after each one below, as ever.
            stop=list(settings.stop) or None,
            seed=settings.seed + step if sampled else None,
        )
        if generation.enable_sleep_mode:
            generation.llm.wake_up(tags=["kv_cache"])
        try:
            if generation.tensor_parallel_size > 1 and is_peft_model(generation.model):
                # As TRL does before a tensor-parallel generation (trl#3671): NCCL drains the
                # trainer's last collective before vLLM's own start.
                torch.distributed.barrier(device_ids=[trainer.accelerator.local_process_index])
            outputs = generation.llm.generate(
                [{"prompt_token_ids": ids} for ids in group_ids],
                sampling_params=params,
                use_tqdm=False,
            )
        finally:
            if generation.enable_sleep_mode:
                # Level 2 drops the weights: training's next generation syncs them again.
                generation.llm.sleep(level=2)
                generation._llm_weights_sleeping = True
        return [
            self._cut_at_stop(trainer._decode(list(sequence.token_ids)))
            for output in outputs[mine]
            for sequence in output.outputs
        ]

    def _cut_at_stop(self, text: str) -> str:
        """Ends a completion at its first stop string, kept, as training cuts them."""
        ends = [text.find(s) + len(s) for s in self.settings.stop if s in text]
        return text[: min(ends)] if ends else text


def _failed_among(result: FunctionResult | None, count: int) -> int:
    """How many of the first ``count`` samples a function's errors cost."""
    if result is None:
        return count
    if any(error.sample_index is None for error in result.errors):
        return count
    return len(
        {
            e.sample_index
            for e in result.errors
            if e.sample_index is not None and e.sample_index < count
        }
    )


def generate_calls(rows: int, world_size: int) -> int:
    """The generate() calls of the rank with the largest share of ``rows`` (Evaluator._share)."""
    largest_share = -(-rows // world_size)
    return -(-largest_share // PROMPTS_PER_BATCH)


def lockstep_calls(engine: str, rows: int, world_size: int) -> int:
    """The generate() calls every rank makes whatever its share of ``rows`` (0: only its own).

    Under FSDP each forward gathers every layer's weights from all ranks: every rank must call
    generate() as often as the one with the largest share (a rank with fewer or no prompts
    fills in with discarded calls), or the others wait forever. Under the other engines a rank
    generates alone once its weights are whole (DDP; ZeRO-3 gathers them up front)."""
    return generate_calls(rows, world_size) if engine == FSDP_ENGINE else 0


def _engine(trainer: RecordingGRPOTrainer) -> str:
    """The engine, as far as validation tells them apart: FSDP or another."""
    if _is_fsdp(trainer):
        return FSDP_ENGINE
    return "deepspeed" if getattr(trainer, "is_deepspeed_enabled", False) else "ddp"


def _colocated_vllm(trainer: RecordingGRPOTrainer) -> Any | None:
    """TRL's colocated vLLM generation of ``trainer`` while its engine runs, else None (the
    job generates with transformers, or with a vLLM server: validation uses transformers)."""
    generation = getattr(trainer, "vllm_generation", None)
    if not getattr(trainer, "use_vllm", False) or generation is None:
        return None
    if generation.mode != "colocate" or getattr(generation, "llm", None) is None:
        return None
    return generation


def _sync_vllm_weights(trainer: RecordingGRPOTrainer) -> None:
    """The trained weights into the colocated engine, unless it has them already (TRL's own
    test before a step's generation; in sleep mode level 2 dropped them after the last one)."""
    generation: Any = trainer.vllm_generation
    step = trainer.state.global_step
    asleep = generation.enable_sleep_mode and generation._llm_weights_sleeping
    if trainer._last_loaded_step != step or asleep:
        generation.sync_weights()
        trainer._last_loaded_step = step


def _gather_tensor_parallel(
    generation: Any, prompt_ids: list[list[int]]
) -> tuple[list[list[int]], slice]:
    """The prompts this rank's engine generates for, and which of them are this rank's own:
    with tensor parallelism every rank of a group generates the group's prompts together."""
    if generation.tensor_parallel_size <= 1:
        return prompt_ids, slice(0, len(prompt_ids))
    shares: list[Any] = [None] * generation.tensor_parallel_size
    torch.distributed.all_gather_object(shares, prompt_ids, group=generation.tp_group)
    index = torch.distributed.get_rank(group=generation.tp_group)
    start = sum(len(share) for share in shares[:index])
    return [ids for share in shares for ids in share], slice(start, start + len(prompt_ids))


def _sampling_params(**values: Any) -> Any:
    from vllm import SamplingParams  # only where vLLM generates

    return SamplingParams(**values)


def _is_fsdp(trainer: RecordingGRPOTrainer) -> bool:
    return bool(getattr(trainer, "is_fsdp_enabled", False))
