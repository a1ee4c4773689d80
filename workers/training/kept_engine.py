"""A colocated vLLM engine kept from one job to the next in the same training process.

Building a colocated engine costs the model's load into vLLM, its compile (cached on disk
across jobs) and, on a GPU, the CUDA-graph capture: tens of seconds at 8B, every job. A
one-process job's training process (the worker's spare) therefore keeps its engine when the
job ends, and the worker gives it the next job on the same base model
(``workers.training.launch``); the next trainer adopts the engine instead of building one.

What makes an adopted engine the same as a fresh one:

- **Weights.** TRL copies every weight of the trainer's model (base + merged LoRA) into vLLM
  before a run's first generation (``_last_loaded_step`` starts at -1), so the previous job's
  weights never generate; the prefix cache is emptied when the engine is kept.
- **Settings.** An engine is adopted only when everything TRL builds it from is equal
  (``EngineKey``: model, parallelism, memory share, context length, sleep mode, ...); any other
  job shuts the kept engine down first and builds its own.
- **Randomness.** Under colocate, vLLM samples from the process's torch generator, and a
  fresh engine's start (seeding, profiling run, warm-up) leaves it in a state of its own. That
  state is saved when an engine is built and restored when it is adopted, so a job samples the
  same completions on an adopted engine as on a fresh one
  (tests/vllm_generation/test_vllm_engine_reuse.py).
- **Process state.** TRL sets RANK/LOCAL_RANK/WORLD_SIZE/MASTER_* for vLLM once the trainer
  exists; left set, the next trainer's accelerate state would read them as a distributed
  launch. They are put back as they were before the engine, and set again on adoption.

Only one-process colocated jobs keep engines (an engine of a torchrun or accelerate job lives
in ranks that exit with the job), and only where the process allows it: the state is an
``EngineKeeper`` object, made by the worker's spare (``workers.training.spare``, with
``may_keep`` under ``RFT_VLLM_KEEP_ENGINE``) and passed to each job it runs (``run_rank``,
``run_grpo``); TRL's engine start is routed through it only while that job's trainer is built.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import random
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from workers.training.generation import shut_down_engine

logger = logging.getLogger(__name__)

# What TRL's colocate start sets for vLLM (VLLMGeneration._init_vllm, ensure_master_addr_port).
_LAUNCH_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
# On our stand-in for TRL's _init_vllm: the method it stands in for.
_ORIGINAL_ATTRIBUTE = "_rft_trl_init_vllm"
# On a VLLMGeneration whose engine may be kept: how it started (_Start).
_START_ATTRIBUTE = "_rft_engine_start"


@dataclass(frozen=True)
class EngineKey:
    """Everything TRL builds a colocated ``LLM`` from (VLLMGeneration._init_vllm); two jobs
    with equal keys get equal engines."""

    model: str
    tensor_parallel_size: int
    gpu_memory_utilization: float
    max_model_length: int | None
    max_num_seqs: int | None
    enable_sleep_mode: bool
    model_impl: str
    trust_remote_code: bool
    seed: int
    quantized: bool

    @classmethod
    def of(cls, generation: Any) -> EngineKey:
        """The key of the engine ``generation`` (a TRL VLLMGeneration) would build."""
        return cls(
            model=str(generation.model.name_or_path),
            tensor_parallel_size=generation.tensor_parallel_size,
            gpu_memory_utilization=generation.gpu_memory_utilization,
            max_model_length=generation.max_model_length,
            max_num_seqs=generation.max_num_seqs,
            enable_sleep_mode=generation.enable_sleep_mode,
            model_impl=generation.model_impl,
            trust_remote_code=generation.trust_remote_code,
            seed=generation.accelerator.process_index // generation.tensor_parallel_size,
            quantized=_has_4bit_layers(generation.model),
        )


@dataclass
class _RandomState:
    torch_cpu: torch.Tensor
    torch_cuda: list[torch.Tensor] | None
    python: Any
    numpy: Any

    @classmethod
    def capture(cls) -> _RandomState:
        return cls(
            torch_cpu=torch.random.get_rng_state(),
            torch_cuda=torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None,
            python=random.getstate(),
            numpy=np.random.get_state(),
        )

    def restore(self) -> None:
        torch.random.set_rng_state(self.torch_cpu)
        if self.torch_cuda is not None:
            torch.cuda.set_rng_state_all(self.torch_cuda)
        random.setstate(self.python)
        np.random.set_state(self.numpy)


@dataclass
class _KeptEngine:
    key: EngineKey
    llm: Any
    # The random state a fresh start of this engine left (see the module's docstring).
    random_after_start: _RandomState
    # The launch variables as TRL set them for this engine, set again on adoption.
    launch_variables: dict[str, str]


@dataclass(frozen=True)
class _Start:
    """How a trainer's engine started: its key, the random state a fresh start left, and the
    launch variables as they were before it."""

    key: EngineKey
    random_after_start: _RandomState
    variables_before: dict[str, str | None]


class EngineKeeper:
    """A training process's kept engine: whether it may keep one, the one it keeps, and the
    route of TRL's colocated engine start through ``_start_or_adopt`` while a trainer is built.

    Owned by whoever runs the process's jobs: the worker's spare makes one (``may_keep``
    under ``RFT_VLLM_KEEP_ENGINE``) and hands it to every job it runs; any other run gets one
    of its own that keeps nothing (its engine is shut down with the run).
    """

    def __init__(self, *, may_keep: bool = False) -> None:
        self.may_keep = may_keep
        self._kept: _KeptEngine | None = None
        self._adoptions = 0

    @contextlib.contextmanager
    def routing_engine_starts(self) -> Iterator[None]:
        """While a trainer is built in this block, TRL's colocated engine start
        (``VLLMGeneration._init_vllm``, called from its constructor) goes through this
        keeper; TRL's own method is back in place after the block."""
        from trl.generation.vllm_generation import VLLMGeneration

        original = VLLMGeneration.__dict__["_init_vllm"]
        trl_start = getattr(original, _ORIGINAL_ATTRIBUTE, original)

        def init_vllm(generation: Any) -> None:
            self._start_or_adopt(generation, trl_start)

        setattr(init_vllm, _ORIGINAL_ATTRIBUTE, trl_start)
        setattr(VLLMGeneration, "_init_vllm", init_vllm)  # noqa: B010 (mypy: no method assignment)
        try:
            yield
        finally:
            setattr(VLLMGeneration, "_init_vllm", original)  # noqa: B010

    def kept_model(self) -> str | None:
        """The model of the engine this process keeps, or None."""
        return self._kept.key.model if self._kept is not None else None

    def adoptions(self) -> int:
        """How many trainers adopted a kept engine (for logs and tests)."""
        return self._adoptions

    def keep_or_release(self, trainer: Any, release: Any) -> bool:
        """At a run's successful end: keep ``trainer``'s colocated engine for the next job where
        this process may, else ``release(trainer)``. Whether it was kept."""
        generation = getattr(trainer, "vllm_generation", None)
        llm = getattr(generation, "llm", None)
        start: _Start | None = getattr(generation, _START_ATTRIBUTE, None)
        if not self.may_keep or generation is None or llm is None or start is None:
            release(trainer)
            return False
        key = start.key
        generation.llm = None
        launch_variables = {
            name: os.environ[name] for name in _LAUNCH_VARIABLES if name in os.environ
        }
        _restore_variables(start.variables_before)
        try:
            # Cached prefixes are the last job's weights' KV: never served to the next job.
            llm.reset_prefix_cache()
            if key.enable_sleep_mode and not llm.llm_engine.is_sleeping():
                llm.sleep(level=2)  # as TRL leaves a fresh engine: the weights come with the sync
        except Exception:
            logger.exception("could not keep the vLLM engine for the next job; shutting it down")
            shut_down_engine(llm)
            return False
        self._kept = _KeptEngine(key, llm, start.random_after_start, launch_variables)
        # The run's objects (trainer, model, optimizer) were allocated before vLLM froze the
        # collector's view of the heap at its start: without unfreezing they would never be
        # freed.
        gc.unfreeze()
        gc.collect()
        if torch.cuda.is_initialized():  # the run used CUDA: give its cached blocks back
            torch.cuda.empty_cache()
        logger.info("keeping the vLLM engine of %s for the next job", key.model)
        return True

    def release_kept(self) -> None:
        """Shut the kept engine down (no-op when none is kept)."""
        kept, self._kept = self._kept, None
        if kept is not None:
            logger.info("shutting down the kept vLLM engine of %s", kept.key.model)
            shut_down_engine(kept.llm)

    def _start_or_adopt(self, generation: Any, start: Any) -> None:
        """TRL's ``_init_vllm`` for ``generation``, adopting the kept engine when it is the one
        ``start`` would build."""
        one_process_colocate = (
            generation.mode == "colocate" and generation.accelerator.num_processes == 1
        )
        if not one_process_colocate:
            self.release_kept()
            start(generation)
            return
        key = EngineKey.of(generation)
        kept = self._kept
        if kept is not None and kept.key != key:
            logger.info(
                "the kept vLLM engine does not fit this job (kept %s, needed %s): "
                "starting a new one",
                kept.key,
                key,
            )
            self.release_kept()
            kept = None
        variables_before = {name: os.environ.get(name) for name in _LAUNCH_VARIABLES}
        if kept is None:
            if not os.environ.get("MASTER_PORT"):
                # vLLM's one-process group listens there. TRL would pick 29500 whenever its
                # check calls it free, which it does while another process's engine listens on
                # it (seen: a kept engine in a worker, then any other one-process engine on the
                # machine failed with EADDRINUSE). A port the kernel hands out is free.
                os.environ["MASTER_PORT"] = str(_free_port())
            start(generation)
            random_after_start = _RandomState.capture()
        else:
            self._kept = None
            os.environ.update(kept.launch_variables)
            generation.llm = kept.llm
            generation._llm_weights_sleeping = key.enable_sleep_mode
            random_after_start = kept.random_after_start
            random_after_start.restore()
            self._adoptions += 1
            logger.info("reusing the kept vLLM engine of %s (no model load, no compile)", key.model)
        if self.may_keep:
            setattr(generation, _START_ATTRIBUTE, _Start(key, random_after_start, variables_before))


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("", 0))
        return int(probe.getsockname()[1])


def _restore_variables(values: dict[str, str | None]) -> None:
    for name, value in values.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def _has_4bit_layers(model: Any) -> bool:
    try:
        import bitsandbytes as bnb
    except ImportError:
        return False
    return any(isinstance(module, bnb.nn.Linear4bit) for module in model.modules())
