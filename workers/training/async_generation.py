"""Generation overlapping training (``hyperparameters.async_generation``).

A vLLM engine runs in a process of its own (``RolloutEngine``); the trainer keeps up to
``max_staleness`` steps' rollout requests queued ahead of the step it trains. At the start of
step t (policy version t-1: the optimizer steps taken) the trainer sends the engine the
policy's weights, tagged t-1, and then the request for step t+max_staleness; it takes step t's
rollouts (requested max_staleness steps earlier) and trains on them while the engine loads the
new weights and samples the next steps. The engine answers each request with the version of the
weights it held, so a step's recorded staleness is what happened, not what was planned.

TRL's loss corrects for the staleness by importance sampling: with
``vllm_importance_sampling_correction`` the trainer recomputes the rollouts' log-probs under the
policy it trains (``old_per_token_logps``) and weighs each token by
exp(old - sampler's log-prob), truncated at IS_CLIP_MAX (``token_truncate``): the same
correction TRL applies to vLLM's numerical mismatch, here covering both.

Which prompts a future step gets must be known before the step starts, so the steps' prompts
come from ``PromptOrder`` (a seeded permutation per epoch, indexed by step number) instead of
TRL's sampler: a resumed run gets the same prompts at the same steps.

What this module does not cover (refused at creation: service.jobs.async_generation): several
ranks, agent rollouts, reproducible sampling, validation sets, sleep mode.
Design and measurements: docs/async-generation.md.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import tempfile
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import torch
from accelerate.utils import is_peft_model

from service.gpu.memory_plan import vllm_max_model_length
from workers.failures import GenerationSetupError
from workers.training.generation import DEFAULT_MEMORY_FRACTION, INSTALL_HINT
from workers.training.grpo_trainer import RecordingGRPOTrainer
from workers.training.spec import TrainingSpec
from workers.training.trainer_common import float_or_none

logger = logging.getLogger(__name__)

# TRL's ``token_truncate`` bound on the per-token importance ratio (its default C_max).
IS_CLIP_MAX = 3.0
# The engine's start (import vLLM, load the model, compile) on 2 busy CPU cores took ~20-40 s;
# a bound on a condition awaited, not a duration expected.
ENGINE_START_TIMEOUT_S = 600.0
IS_METRICS = {
    "min": "sampling/importance_sampling_ratio/min",
    "mean": "sampling/importance_sampling_ratio/mean",
    "max": "sampling/importance_sampling_ratio/max",
}


def async_grpo_arguments() -> dict[str, Any]:
    """GRPOConfig fields of an async job: TRL starts no engine of its own (the trainer is
    handed the RolloutEngine's stand-in), and corrects each token by its importance ratio."""
    return {
        "use_vllm": False,
        "vllm_importance_sampling_correction": True,
        "vllm_importance_sampling_mode": "token_truncate",
        "vllm_importance_sampling_clip_max": IS_CLIP_MAX,
    }


@dataclass(frozen=True)
class EngineSettings:
    model_path: str
    memory_fraction: float
    max_model_length: int | None
    max_num_seqs: int
    seed: int
    on_cpu: bool


class RolloutEngine:
    """A vLLM ``LLM`` in a child process, fed in order over a pipe: weights (tagged with a
    policy version) and generation requests, answered in the order they were sent."""

    def __init__(self, settings: EngineSettings, weights_dir: Path) -> None:
        self._settings = settings
        self._weights_dir = weights_dir
        context = multiprocessing.get_context("spawn")
        self._conn, child_conn = context.Pipe()
        self._process = context.Process(
            target=_engine_main, args=(child_conn, settings), name="rft-rollout-engine", daemon=True
        )
        self._ready = False
        self._process.start()
        child_conn.close()

    def wait_ready(self) -> None:
        if self._ready:
            return
        reply = self._receive(ENGINE_START_TIMEOUT_S)
        if reply[0] != "ready":
            raise GenerationSetupError(f"the rollout engine did not start: {reply}")
        self._ready = True

    def push_weights(self, version: int, weights: dict[str, torch.Tensor]) -> None:
        """Send the policy's weights; requests sent after this sample with them."""
        self._weights_dir.mkdir(parents=True, exist_ok=True)
        path = self._weights_dir / f"policy-{version}.pt"
        torch.save(weights, path)
        self._conn.send(("weights", version, str(path)))

    def request(self, request_id: int, prompt_ids: list[list[int]], n: int, sampling: dict) -> None:
        self._conn.send(("generate", request_id, prompt_ids, n, sampling))

    def result(self, request_id: int) -> tuple[int, list[list[int]], list[list[float]]]:
        """(the policy version that sampled, completion ids, per-token log-probs) of a request:
        the next answer, as the engine answers in order."""
        reply = self._receive(None)
        if reply[0] != "rollouts" or reply[1] != request_id:
            raise RuntimeError(f"the rollout engine answered {reply[:2]} to request {request_id}")
        _, _, version, completion_ids, logprobs = reply
        return version, completion_ids, logprobs

    def close(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            self._conn.send(("stop",))
        self._process.join(30)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()
        self._conn.close()

    def _receive(self, timeout_s: float | None) -> tuple[Any, ...]:
        # Polled in slices so a dead engine is noticed instead of waited on forever.
        waited = 0.0
        while not self._conn.poll(1.0):
            waited += 1.0
            if not self._process.is_alive():
                raise GenerationSetupError(
                    f"the rollout engine exited (code {self._process.exitcode})"
                )
            if timeout_s is not None and waited >= timeout_s:
                raise GenerationSetupError(f"the rollout engine did not answer in {timeout_s} s")
        reply: tuple[Any, ...] = self._conn.recv()
        if reply[0] == "error":
            raise GenerationSetupError(f"the rollout engine failed: {reply[1]}")
        return reply


def _engine_main(conn: Connection, settings: EngineSettings) -> None:  # pragma: no cover
    """The engine process: one vLLM ``LLM``, one message at a time (runs in the child)."""
    try:
        _die_with_parent()
        # One process is enough: the engine's core runs here, not in a further subprocess.
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        if settings.on_cpu:
            # The engine shares the CPU with the trainer at the same time (that is the point):
            # one thread, unpinned, instead of vLLM's default of binding threads to every core,
            # where both processes' threads would fight for the same cores.
            os.environ["VLLM_CPU_OMP_THREADS_BIND"] = "nobind"
            os.environ["OMP_NUM_THREADS"] = "1"
            torch.set_num_threads(1)
            from workers.training.vllm_cpu import keep_plain_linear_weights

            keep_plain_linear_weights()  # so that load_weights can write into the layers
        from vllm import LLM, SamplingParams

        llm = LLM(
            model=settings.model_path,
            gpu_memory_utilization=settings.memory_fraction,
            max_model_len=settings.max_model_length,
            max_num_seqs=settings.max_num_seqs,
            seed=settings.seed,
            max_num_batched_tokens=4096,
            # Log-probs after temperature and top-p, as the trainer's are (TRL does the same).
            logprobs_mode="processed_logprobs",
        )
        conn.send(("ready",))
        version: int | None = None
        while True:
            message = conn.recv()
            if message[0] == "stop":
                return
            if message[0] == "weights":
                _, version, path = message
                weights = torch.load(path)
                Path(path).unlink(missing_ok=True)
                model = llm.llm_engine.model_executor.driver_worker.model_runner.model
                model.load_weights(list(weights.items()))
                llm.reset_prefix_cache()  # the cached KV is the old weights'
                continue
            _, request_id, prompt_ids, n, sampling = message
            params = SamplingParams(n=n, logprobs=0, **sampling)
            outputs = llm.generate(
                [{"prompt_token_ids": ids} for ids in prompt_ids], params, use_tqdm=False
            )
            completion_ids: list[list[int]] = []
            logprobs: list[list[float]] = []
            for output in outputs:
                for sample in output.outputs:
                    completion_ids.append(list(sample.token_ids))
                    logprobs.append(
                        [next(iter(entry.values())).logprob for entry in sample.logprobs or []]
                    )
            conn.send(("rollouts", request_id, version, completion_ids, logprobs))
    except BaseException:
        with contextlib.suppress(Exception):
            conn.send(("error", traceback.format_exc(limit=8)))
        raise


def _die_with_parent() -> None:  # pragma: no cover
    """A worker killed outright must not leave its engine running (Linux only)."""
    import ctypes
    import signal

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class PromptOrder:
    """Which dataset rows each step trains on: a seeded permutation per epoch, consumed
    ``prompts_per_step`` at a time, so step t's prompts are known before step t starts."""

    def __init__(self, rows: int, prompts_per_step: int, seed: int) -> None:
        self._rows = rows
        self._per_step = prompts_per_step
        self._seed = seed
        self._epochs: dict[int, list[int]] = {}

    def step(self, step: int) -> list[int]:
        """The row indices of ``step`` (1-based); a step may span two epochs."""
        start = (step - 1) * self._per_step
        return [self._at(position) for position in range(start, start + self._per_step)]

    def _at(self, position: int) -> int:
        epoch, offset = divmod(position, self._rows)
        if epoch not in self._epochs:
            generator = torch.Generator().manual_seed(self._seed * 100_003 + epoch)
            self._epochs[epoch] = torch.randperm(self._rows, generator=generator).tolist()
            self._epochs.pop(epoch - 2, None)
        return self._epochs[epoch][offset]


@dataclass
class _Requested:
    prompt_ids: list[list[int]]  # one per prompt
    sampling_config_version: int


@dataclass
class StepRollouts:
    """What the engine said about the rollouts one step trained on."""

    policy_version: int
    rollout_version: int
    sampling_config_version: int
    groups: int

    def record(self, max_staleness: int, logs: dict[str, Any]) -> dict[str, Any]:
        """The step's ``async_generation`` as stored (service.jobs.schemas.AsyncGenerationStep)."""
        staleness = self.policy_version - self.rollout_version
        return {
            "max_staleness": max_staleness,
            "policy_version": self.policy_version,
            "rollout_policy_versions": [self.rollout_version] * self.groups,
            "staleness_max": staleness,
            "staleness_mean": float(staleness),
            "sampling_config_versions": [self.sampling_config_version],
            "importance_sampling_ratio": {
                name: float_or_none(logs.get(key)) for name, key in IS_METRICS.items()
            },
        }


@dataclass
class AsyncRollouts:
    """Stands where TRL keeps its vLLM backend (``trainer.vllm_generation``): TRL calls
    ``sync_weights()`` once per optimizer step, then ``generate()`` for the step's prompts."""

    trainer: AsyncRolloutTrainer
    engine: RolloutEngine
    max_staleness: int
    config_version: Callable[[], int]
    stop: Sequence[str] = ()
    # Read and set by TRL and RecordingGRPOTrainer.set_sampling, as on TRL's backend.
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float | None = None
    repetition_penalty: float = 1.0
    max_completion_length: int = 16
    generation_kwargs: dict[str, Any] = field(default_factory=dict)
    mode: str = "async"
    _requested: dict[int, _Requested] = field(default_factory=dict)
    _next_request: int | None = None
    last: StepRollouts | None = None

    def sync_weights(self) -> None:
        """Start of a step: the policy's weights to the engine, then the requests up to
        ``max_staleness`` steps ahead (sampled with those weights)."""
        trainer = self.trainer
        version = trainer.state.global_step  # optimizer steps taken: the policy's version
        self.engine.wait_ready()
        self.engine.push_weights(version, policy_weights(trainer.model))
        if self._next_request is None:  # the run's (or the resume's) first step
            self._next_request = version + 1
        last_step = min(version + 1 + self.max_staleness, int(trainer.args.max_steps))
        while self._next_request <= last_step:
            self._request(self._next_request)
            self._next_request += 1

    def _request(self, step: int) -> None:
        trainer = self.trainer
        dataset: Any = trainer.train_dataset
        prompts = [dataset[i]["prompt"] for i in trainer.prompt_order.step(step)]
        prompt_ids, _, _ = trainer._tokenize_prompts(prompts)
        sampling = {
            "temperature": self.temperature,
            "top_p": self.top_p,
            "top_k": self.top_k,
            "min_p": 0.0 if self.min_p is None else self.min_p,
            "repetition_penalty": self.repetition_penalty,
            "max_tokens": self.max_completion_length,
            **({"stop": list(self.stop)} if self.stop else {}),
        }
        requested = _Requested([list(ids) for ids in prompt_ids], self.config_version())
        self._requested[step] = requested
        self.engine.request(step, requested.prompt_ids, trainer.group_size, sampling)

    def generate(
        self, prompts: list[list[int]], images: Any, num_generations: int, profiler: Any = None
    ) -> tuple[list[list[int]], list[list[int]], list[list[list[float]]], None]:
        step = self.trainer.state.global_step + 1
        requested = self._requested.pop(step)
        if [list(ids) for ids in prompts[::num_generations]] != requested.prompt_ids:
            raise RuntimeError(f"step {step}: the trainer's prompts are not those requested")
        with profiler or contextlib.nullcontext():
            version, completion_ids, logprobs = self.engine.result(step)
        self.last = StepRollouts(
            policy_version=step - 1,
            rollout_version=version,
            sampling_config_version=requested.sampling_config_version,
            groups=len(requested.prompt_ids),
        )
        return prompts, completion_ids, [[[lp] for lp in seq] for seq in logprobs], None

    def close(self) -> None:
        self.engine.close()


class AsyncRolloutTrainer(RecordingGRPOTrainer):
    """RecordingGRPOTrainer fed by a RolloutEngine: each step trains on the rollouts the engine
    sampled ahead, on the prompts PromptOrder gives that step."""

    def __init__(
        self,
        *args: Any,
        rollout_engine: RolloutEngine,
        max_staleness: int,
        prompts_per_step: int,
        config_version: Callable[[], int],
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        assert self.train_dataset is not None
        self.prompt_order = PromptOrder(
            len(self.train_dataset),  # type: ignore[arg-type]
            prompts_per_step,
            int(self.args.seed),
        )
        self.max_staleness = max_staleness
        # TRL's vLLM path from here on: sync_weights + generate on our stand-in.
        self.use_vllm = True
        self.vllm_mode = "async"
        self._last_loaded_step = -1
        self.rollouts = AsyncRollouts(
            trainer=self,
            engine=rollout_engine,
            max_staleness=max_staleness,
            config_version=config_version,
            stop=self.stop_sequences,
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k if self.top_k is not None else -1,
            min_p=self.min_p,
            repetition_penalty=self.repetition_penalty,
            max_completion_length=int(self.max_completion_length or 16),
        )
        # Where TRL looks for its vLLM backend: our stand-in has the two methods it calls.
        self.vllm_generation = self.rollouts  # type: ignore[assignment]

    @property
    def group_size(self) -> int:
        return int(self.num_generations or 1)

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        if self.model is not None and self.model.training:
            step = self.state.global_step + 1
            rows = [self.train_dataset[i] for i in self.prompt_order.step(step)]  # type: ignore[index]
            inputs = [dict(row) for row in rows for _ in range(self.group_size)]
        return super()._generate_and_score_completions(inputs)

    def async_generation_record(self, step: int, logs: dict[str, Any]) -> dict[str, Any] | None:
        last = self.rollouts.last
        if last is None or last.policy_version != step - 1:
            return None
        return last.record(self.max_staleness, logs)


def policy_weights(model: Any) -> dict[str, torch.Tensor]:
    """The policy's weights as vLLM names them, copied to CPU: a LoRA model's adapter merged
    into its base for the copy (as TRL's colocated sync does), then unmerged."""
    if not is_peft_model(model):
        return {name: p.detach().to("cpu", copy=True) for name, p in model.named_parameters()}
    model.merge_adapter()
    try:
        weights = {}
        for name, param in model.named_parameters():
            name = name.removeprefix("base_model.model.").replace(".base_layer", "")
            if model.prefix in name or "original_module" in name:
                continue
            name = name.replace("modules_to_save.default.", "")
            weights[name] = param.detach().to("cpu", copy=True)
        return weights
    finally:
        model.unmerge_adapter()


def start_rollout_engine(spec: TrainingSpec, model_path: str) -> RolloutEngine:
    """The job's engine, starting (it loads while the trainer is built); raises
    GenerationSetupError where this worker cannot run one."""
    generation = spec.generation
    hp = spec.hyperparameters
    if not generation.uses_vllm:
        raise GenerationSetupError(
            "hyperparameters.async_generation needs vLLM generation, and this worker "
            f"generates with transformers ({generation.why_not_vllm or 'its settings'}): "
            f"{INSTALL_HINT}"
        )
    if generation.server is not None:
        raise GenerationSetupError(
            "hyperparameters.async_generation runs its own vLLM engine: it cannot use the "
            "worker's vLLM server (RFT_VLLM_MODE=server); use RFT_VLLM_MODE=colocate"
        )
    settings = EngineSettings(
        model_path=model_path,
        memory_fraction=hp.vllm_gpu_memory_utilization
        or generation.memory_fraction
        or DEFAULT_MEMORY_FRACTION[generation.device],
        max_model_length=vllm_max_model_length(hp, generation.max_model_length),
        # Every completion of a step in one batch.
        max_num_seqs=hp.completions_per_step,
        seed=hp.seed,
        on_cpu=generation.device == "cpu",
    )
    Path(spec.output_dir).mkdir(parents=True, exist_ok=True)
    weights = Path(tempfile.mkdtemp(prefix="rollout-weights-", dir=spec.output_dir))
    return RolloutEngine(settings, weights)
