"""vLLM as the inference server's generator: one engine per base model, LoRA adapters per request.

Why vLLM where it runs: its multi-LoRA serving keeps a base model's weights once and applies an
adapter per request (``LoRARequest``), with adapters cached by vLLM itself, so switching
between a base model and its jobs' adapters costs no reload; it also batches and pages the KV
cache. Only the generate call lives here: the pool encodes the prompt (chat template included)
and builds the answer from the token ids returned, exactly as for transformers.

Imported only when the pool chose vLLM (``workers.training.generation.choose_generation``):
the main environment has no vLLM.

Why each engine runs in a process of its own (vLLM's V1 multiprocessing: an ``EngineCore``
process per ``vllm.LLM``), read in vLLM 0.30's source: an engine started in this process
shares process-wide state with every other engine here, and cannot be shut down alone.

- ``EngineCore.shutdown`` (``vllm/v1/engine/core.py``) ends in
  ``cleanup_dist_env_and_memory`` (``vllm/distributed/parallel_state.py``), which runs
  ``destroy_model_parallel`` (the module globals ``_TP``, ``_PP``, ``_DP``, ``_EP``, ``_DCP``,
  ``_PCP``... set to None) and ``destroy_distributed_environment`` (``_WORLD``, then
  ``torch.distributed.destroy_process_group()``: the default group). Those groups belong to
  no engine: a second engine's worker finds them set up (``init_distributed_environment``
  skips ``init_process_group`` once ``torch.distributed.is_initialized()``, and
  ``ensure_model_parallel_initialized`` only checks their sizes) and uses the first one's.
  Evicting either left the other failing its next step in ``Worker.execute_model``
  (``vllm/v1/worker/gpu_worker.py``): "pipeline model parallel group is not initialized"
  (``get_pp_group``), reproduced on CPU in tests/vllm_generation/test_vllm_pool_eviction.py.
- More of it is per process, not per engine: ``EngineCore.__init__`` calls ``gc.freeze()``
  and ``enable_envs_cache()``, its shutdown ``gc.unfreeze()`` and ``disable_envs_cache()``;
  on CUDA ``Worker.shutdown`` releases the ``CuMemAllocator`` singleton's pools and the
  cleanup empties the process's allocator cache; on CPU ``CPUWorker.init_device`` replaces
  ``torch.set_num_threads`` for the whole process, and ``CPUWorker.determine_available_memory``
  sizes the KV cache as the memory share minus this *process's* RSS, so a second engine in
  the same process got no KV cache at all (it failed to start at the default share).

So leaving the distributed groups alone on eviction (re-doing ``EngineCore.shutdown`` minus
its last line) or keeping one group for all engines would fix the crash but not the rest, and
would leave freeing an engine's memory to the garbage collector. With a process per engine,
shutting one down ends its process (``MPClient.shutdown`` -> ``CoreEngineProcManager.shutdown``,
``vllm/v1/engine/core_client.py``, ``vllm/v1/engine/utils.py``), and the operating system
takes back all of its memory (RAM, or the GPU's with its CUDA context); the engines left are
other processes, untouched. It is also vLLM's default mode (``VLLM_ENABLE_V1_MULTIPROCESSING``
defaults to 1), the one ``vllm serve`` runs. The price: starting an engine imports vLLM in
a new process (on CPU two: vLLM's CPU platform picks its multiprocessing executor, so the
model runs in a worker process under the EngineCore; 25-45 s instead of ~9 s measured on a
busy 2-core machine), ~0.6 GiB of RAM for the EngineCore process, and each request crosses a
local socket. Training workers keep their colocated engine in-process (TRL's
``external_launcher``): one engine per process, released only after the job.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from service.inference.protocol import GenerationRequest
from workers.process_environment import environment_for_block
from workers.training.generation import Generation

# The largest LoRA rank an engine accepts; vLLM sizes its adapter slots by it. Jobs' default
# rank is 16 and TRL's LoRA guide finds 1-32 enough for RL; a larger adapter is refused (400).
MAX_LORA_RANK = 64
# Adapters applied within one batch. The pool generates one request at a time, so one slot is
# enough; the other adapters wait in vLLM's CPU-side cache (max_cpu_loras), a copy away.
MAX_LORAS_PER_BATCH = 1
# How long an evicted engine's process gets to exit on its own before vLLM kills it. On CPU its
# worker process takes ~5 s to stop (vLLM's VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS), just the
# default wait of vLLM's process manager, which then kills the EngineCore mid-teardown.
SHUTDOWN_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class VllmOutput:
    """One generated sequence: its token ids and whether vLLM stopped it (EOS or stop string)."""

    token_ids: list[int]
    stopped: bool


def load_engine(
    model_path: str, generation: Generation, max_adapters: int, max_model_length: int | None
) -> Any:
    """A ``vllm.LLM`` for one base model, ready to take LoRA adapters per request; its engine
    runs in a process of its own (see the module's docstring), so ``memory_fraction`` is that
    process's share (on CPU: of RAM, less what the engine process itself uses)."""
    from vllm import LLM
    from vllm.v1.engine.core_client import MPClient

    options: dict[str, Any] = {}
    if max_model_length is not None:
        options["max_model_len"] = max_model_length
    with _engine_process_environment():
        engine = LLM(
            model=model_path,
            enable_lora=True,
            max_loras=MAX_LORAS_PER_BATCH,
            max_cpu_loras=max(max_adapters, MAX_LORAS_PER_BATCH),
            max_lora_rank=MAX_LORA_RANK,
            gpu_memory_utilization=generation.memory_fraction,
            **options,
        )
    if not isinstance(engine.llm_engine.engine_core, MPClient):
        # vLLM's environment cache (enabled while an in-process engine lives here) kept an
        # earlier VLLM_ENABLE_V1_MULTIPROCESSING=0: shutting this engine down would break others.
        engine.llm_engine.engine_core.shutdown()
        raise RuntimeError("vLLM started the inference engine in this process, not its own")
    _wake_waiters_when_the_process_dies(engine.llm_engine.engine_core)
    return engine


def _wake_waiters_when_the_process_dies(client: Any) -> None:
    """Make a request in flight fail with ``EngineDeadError`` when the engine's process dies.

    vLLM 0.30's ``SyncMPClient.get_output`` waits on ``outputs_queue`` with no timeout; when the
    EngineCore dies mid-request, ``MPClient.start_engine_core_monitor`` marks the engine dead
    and shuts the client down, which stops the thread that fills that queue without putting
    anything in it: the request (and the pool's lock with it) would wait forever. Requests
    sent after the monitor noticed fail already (``ensure_alive``). After a shutdown on
    purpose the error lands in a queue nobody reads.
    """
    from multiprocessing.connection import wait

    from vllm.v1.engine.exceptions import EngineDeadError

    sentinels = client.resources.engine_manager.sentinels()
    outputs = client.outputs_queue  # not the client: the thread must not keep it alive

    def watch() -> None:
        wait(sentinels)
        outputs.put_nowait(EngineDeadError())

    threading.Thread(target=watch, name="vllm-engine-death-watch", daemon=True).start()


@contextlib.contextmanager
def _engine_process_environment() -> Iterator[None]:
    """VLLM_ENABLE_V1_MULTIPROCESSING=1 while an engine starts (vLLM reads it then, and only
    then), restored after: in a process that also trains (the tests), TRL's colocated engine
    must stay in-process. Where nothing chose a start method, ``spawn``, as ``vllm serve`` does:
    this process has threads (the server's, earlier engines' sockets), which a fork would copy
    half-way; on CPU vLLM always spawns, and where CUDA is initialised it must."""
    wanted = {"VLLM_ENABLE_V1_MULTIPROCESSING": "1"}
    if not os.environ.get("VLLM_WORKER_MULTIPROC_METHOD"):
        wanted["VLLM_WORKER_MULTIPROC_METHOD"] = "spawn"
    with environment_for_block(wanted):
        yield


def context_length(engine: Any) -> int:
    return int(engine.llm_engine.model_config.max_model_len)


def lora_rank(adapter_directory: Path) -> int:
    """The largest rank in a PEFT adapter's config (``r``, or a per-layer ``rank_pattern``)."""
    config = json.loads((adapter_directory / "adapter_config.json").read_text())
    per_layer = config.get("rank_pattern") or {}
    return max([int(config.get("r", 0)), *(int(rank) for rank in per_layer.values())])


def generate(
    engine: Any,
    prompt_token_ids: list[int],
    request: GenerationRequest,
    adapter: tuple[str, int, Path] | None,
) -> list[VllmOutput]:
    """``request``'s sequences (one under greedy decoding: the pool repeats it ``n`` times)."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt
    from vllm.lora.request import LoRARequest

    sampling = request.temperature > 0
    params = SamplingParams(
        n=request.n if sampling else 1,
        max_tokens=request.max_tokens,
        temperature=request.temperature if sampling else 0.0,
        top_p=request.top_p if sampling else 1.0,
        seed=request.seed,
        # vLLM stops at a stop string; the pool still cuts the decoded text there itself.
        stop=[stop for stop in request.stop if stop] or None,
    )
    lora = None
    if adapter is not None:
        name, int_id, directory = adapter
        lora = LoRARequest(name, int_id, str(directory))
    (output,) = engine.generate(
        [TokensPrompt(prompt_token_ids=prompt_token_ids)],
        params,
        lora_request=lora,
        use_tqdm=False,
    )
    return [
        VllmOutput(token_ids=list(sequence.token_ids), stopped=sequence.finish_reason == "stop")
        for sequence in output.outputs
    ]


def shutdown(engine: Any) -> None:
    """End an evicted engine's process, and with it all of its memory; other engines run on.

    Only that process: ``MPClient.shutdown`` stops its EngineCore (SIGTERM, then a kill after
    ``timeout``) and closes this side's sockets; nothing process-wide is torn down here.
    """
    engine.llm_engine.engine_core.shutdown(timeout=SHUTDOWN_TIMEOUT_S)


def died(error: BaseException) -> bool:
    """Whether ``error`` says the engine's process is gone (killed, out of memory): the engine
    will not answer again, and must be started afresh."""
    from vllm.v1.engine.exceptions import EngineDeadError

    return isinstance(error, EngineDeadError)
