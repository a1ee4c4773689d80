"""The warm spare: a one-process training process that waits for the worker's next job.

``python -m workers.training.spare`` imports torch, transformers and TRL ahead of time (in a
thread at the lowest CPU priority: "The spare's priority" below), starts the common job's
sandbox, then waits on stdin for a job folder and runs it as rank 0 of one
(``workers.training.rank_process.run_rank``). When the job's vLLM engine is kept
(``workers.training.kept_engine``: the spare owns the ``EngineKeeper``), it goes on taking
jobs on stdin. The worker starts, hands out and stops spares (``workers.training.launch``).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import json
import logging
import os
import select
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from workers.training.rank_process import (
    LAUNCH_VARIABLES,
    MODULE,
    configure_logging,
    die_with_parent,
    run_rank,
)
from workers.training.thread_priority import (
    can_lower_threads,
    lowered_threads,
    lowest_priority,
    may_raise_priority,
    raise_lowered_threads,
)

if TYPE_CHECKING:
    from sandbox.reward_host import ProcessSandbox
    from workers.training.kept_engine import EngineKeeper

logger = logging.getLogger("workers.training.spare")

# Logged once a spare has imported everything (bench/bench_first_step.py waits for it).
SPARE_READY = "spare training process ready for a job"
# Logged by a spare forked from the worker's template (spare_template), as it starts.
FORKED_SPARE = "spare forked from the template"


def _warm_imports() -> None:
    """What a job needs first, imported while no job waits (seconds on a cold machine)."""
    import multiprocessing.connection  # noqa: F401

    import workers.training.grpo
    import workers.training.ranks
    import workers.training.sft
    import workers.training.trackers  # noqa: F401
    from sandbox.reward_host import ProcessSandbox  # noqa: F401
    from service.settings import sandbox_settings  # noqa: F401
    from workers.job_sandbox import JobRewardSandbox  # noqa: F401


def _warm_first_job() -> None:
    """Pay, while no job waits, what a job's first trainer would otherwise pay on its way to
    step 1 (bench/bench_first_step.py). Nothing here depends on the job, and nothing holds
    memory beyond a module or a table: no model is loaded. (A spare runs the same parts, split
    between its warm-up thread and its main thread: ``_run_spare``.)"""
    _warm_tables()
    _warm_first_step()
    _freeze_imports()


def _warm_tables() -> None:
    """Imports and tables a first trainer builds (run at the spare's idle priority: nothing
    here starts a thread that a job goes on using)."""
    import importlib.util

    from workers.training.cuda import NVIDIA_PROC

    # accelerate imports DeepSpeed whenever it is installed, the first time the trainer asks
    # whether its model is a PEFT model (extract_model_from_parallel). Only where the driver
    # lists no GPU (read from /proc: asking torch would start CUDA in this thread): DeepSpeed's
    # import probes the CUDA accelerator, which an idle spare must not hold (not verified on a
    # GPU; there 0.1-0.2 s is nothing next to loading the model).
    no_gpu = not any(Path(NVIDIA_PROC, "gpus").glob("*"))
    if no_gpu and importlib.util.find_spec("deepspeed") is not None:
        import deepspeed  # noqa: F401
    # transformers compiles its table of checkpoint key renamings (~900 regexes, every model
    # type) at the first from_pretrained, and keeps it for the process. An internal API:
    # a transformers without it only loses the head start.
    with contextlib.suppress(Exception):
        from transformers.conversion_mapping import get_checkpoint_conversion_mapping

        get_checkpoint_conversion_mapping("llama")


def _warm_first_step() -> None:
    """torch's first autograd pass and optimizer step, and its first record_function (TRL
    profiles every step with one; it imports torch's CUPTI monitor), on a throwaway layer;
    fork_rng leaves the random state as a fresh process has it. ~0.02 s. A spare runs it on
    its main thread, at the job's priority: the first backward starts autograd's thread per
    GPU, which the job's backward then uses."""
    import torch

    with torch.random.fork_rng(devices=[]), torch.autograd.profiler.record_function("warm-up"):
        layer = torch.nn.Linear(8, 8)
        optimizer = torch.optim.AdamW(layer.parameters(), lr=1e-3)
        torch.nn.functional.log_softmax(layer(torch.ones(2, 8)), dim=-1).mean().backward()
        torch.nn.utils.clip_grad_norm_(layer.parameters(), 1.0)
        optimizer.step()


def _freeze_imports() -> None:
    # The imports left about half a million objects for the cyclic collector to walk, and
    # Trainer.train() runs gc.collect() before its first step (accelerate's free_memory).
    # Freezing them (module-level objects that live as long as the process) takes them out of
    # every later collection; the job's own objects are collected as usual.
    gc.collect()
    gc.freeze()


# The spare's priority (issue 22). Its warm-up (imports, tables, gc: seconds of CPU) runs while
# the previous job trains, in a thread of its own at the lowest CPU priority (nice 19,
# SCHED_IDLE): it takes only CPU that the job leaves idle. Linux keeps nice and the scheduling
# policy per thread, and a thread inherits its creator's: the main thread, which runs the job,
# stays at the priority the worker gave the process. An unprivileged process cannot raise a
# thread's priority again (that takes CAP_SYS_NICE, or RLIMIT_NICE), so the design never needs
# to, except for threads that a library started from the warm-up thread; those are raised when
# the job comes where the process may (root, or as the worker raises them: launch.py), and
# where it may not, the libraries known to start threads when loaded (numpy's OpenBLAS,
# pyarrow's jemalloc) are loaded by the main thread first. The worker starts the spare in
# its session (launch.WarmProcesses.start_spare: with autogroup scheduling a session of its
# own would share the CPU evenly with the job's). "normal" keeps the warm-up at the worker's
# priority, and the spare in a session of its own, as before issue 22: for comparisons
# (bench/bench_spare_priority.py) and for tests that cannot wait for an idle CPU.
SPARE_PRIORITY_ENV = "RFT_SPARE_WARM_UP_PRIORITY"
# A job that comes before the warm-up ended, in a process that cannot raise the warm-up thread:
# waited for while the thread gets CPU; if it runs for less than this share of a window while
# it waits for a CPU for more than half of it (other processes hold every CPU), the spare
# starts the job in a fresh process image at its own priority instead (exec: same pid).
_STARVED_RUN_SHARE = 0.1
_STARVED_WINDOW_S = 0.5


def _start_sandbox_ahead() -> ProcessSandbox | None:
    """A spare's sandbox for the common job (no network, no secrets, no runtime packages),
    started while no job waits: a sandbox start (the bubblewrap probe, once per process, then
    bwrap and a Python start) is 50-100 ms, far more on a busy machine. Its processes have
    loaded nothing: a job's reward code goes into them as into new ones. None where it cannot
    start; the job then starts its own (and fails saying why)."""
    from sandbox.reward_host import ProcessSandbox
    from service.settings import get_settings, sandbox_settings

    try:
        return ProcessSandbox(sandbox_settings(get_settings(), allow_network=False, secrets={}))
    except Exception as error:
        logger.warning("no sandbox started ahead of the job: %s", error)
        return None


def _take_jobs_while_keeping_engine(status: int, engines: EngineKeeper) -> int:
    """After a spare's job: while its vLLM engine is kept, run the jobs the worker sends on
    stdin (the same base model's, launch.KeptProcesses). Ends, the engine shut down, when the
    worker closes stdin or a job fails; the worker stops the process otherwise."""
    while status == 0 and engines.kept_model() is not None:
        line = sys.stdin.readline()
        if not line:
            break
        status = run_rank(Path(json.loads(line)["job_dir"]), engines=engines)
    engines.release_kept()
    return status


# Shared libraries that start threads of their own when loaded, where their packages' wheels
# bundle them (the glob is relative to the package's site directory): numpy's OpenBLAS (its
# thread pool) and pyarrow's libarrow (jemalloc's background thread).
_THREAD_STARTING_LIBRARIES = (
    ("numpy", "numpy.libs/*openblas*.so*"),
    ("pyarrow", "pyarrow/libarrow.so*"),
)


def start_library_threads_here() -> None:
    """Load, on this thread (the job's), the libraries known to start threads when loaded, so
    that their threads get the job's priority. The library alone takes ~10 ms (the package's
    import, which then finds it loaded, ~0.2 s: pyarrow imports numpy); the package's import
    where its library is not where its wheel puts it."""
    import importlib
    import importlib.util

    # OpenBLAS's threads spin when they start, ~0.1 s of CPU (2^28 cycles) before they sleep:
    # CPU the running job would lose. Read once, when OpenBLAS loads: 2^4 cycles; the job's
    # numpy (not used for training: torch does the math) then sleeps sooner between calls.
    # A value the worker was given stands.
    given = "OPENBLAS_THREAD_TIMEOUT" in os.environ
    os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")
    try:
        for package, pattern in _THREAD_STARTING_LIBRARIES:
            spec = importlib.util.find_spec(package)
            if spec is None or spec.origin is None:
                continue
            try:
                ctypes.CDLL(str(sorted(Path(spec.origin).parent.parent.glob(pattern))[0]))
            except (IndexError, OSError):
                with contextlib.suppress(ImportError):
                    importlib.import_module(package)
    finally:  # the job's processes see the environment the worker gave
        if not given:
            del os.environ["OPENBLAS_THREAD_TIMEOUT"]


def warm_up_in_background(lowest: bool, done: int) -> None:
    """The spare's warm-up thread: at the lowest priority (``lowest``), then write to ``done``."""
    if lowest:
        with contextlib.suppress(OSError):  # refused here: it warms up at the worker's priority
            lowest_priority().apply(threading.get_native_id())
    try:
        _warm_imports()
        _warm_tables()
        _freeze_imports()
    except BaseException:
        # The job that comes meets the same error, and fails saying so.
        logger.exception("the spare's warm-up failed")
    finally:
        os.write(done, b"x")


def _wait_for_warm_up_or_job(done: int) -> bool:
    """Until the warm-up thread ends (False) or the worker writes (True: a job, or EOF)."""
    ready, _, _ = select.select([sys.stdin.fileno(), done], [], [])
    return sys.stdin.fileno() in ready


def _schedstat(tid: int) -> tuple[int, int] | None:
    """Nanoseconds thread ``tid`` ran and waited for a CPU (runnable), or None if unknown."""
    try:
        fields = Path(f"/proc/self/task/{tid}/schedstat").read_text().split()
        return int(fields[0]), int(fields[1])
    except (OSError, ValueError, IndexError):
        return None


def starved(ran_ns: int, waited_ns: int, window_s: float = _STARVED_WINDOW_S) -> bool:
    """A thread that wanted a CPU most of the window and hardly got one."""
    window_ns = window_s * 1e9
    return ran_ns < _STARVED_RUN_SHARE * window_ns and waited_ns > 0.5 * window_ns


def _finish_warm_up_for(job_dir: Path, warm_up: threading.Thread, may_raise: bool) -> None:
    """A job came before the warm-up ended: let the warm-up finish at the job's priority, or,
    where its thread cannot be raised and gets no CPU, start the job in a fresh process
    image (os.execv: the same pid, the worker sees no difference; cold imports)."""
    tid = warm_up.native_id
    assert tid is not None, "the warm-up thread was started"
    if tid not in (raise_lowered_threads(os.getpid()) if may_raise else [tid]):
        warm_up.join()
        return
    before = _schedstat(tid)
    while warm_up.is_alive():
        warm_up.join(_STARVED_WINDOW_S)
        now = _schedstat(tid)
        if before is None or now is None or not warm_up.is_alive():
            continue
        if starved(now[0] - before[0], now[1] - before[1]):
            logger.warning(
                "the spare's warm-up gets no CPU (other processes hold every CPU) and this "
                "process may not raise its priority: starting the job in a fresh process"
            )
            for handler in logging.getLogger().handlers:
                handler.flush()
            os.execv(sys.executable, [sys.executable, "-m", MODULE, str(job_dir)])
        before = now


def _run_spare() -> int:
    """Warm up for a job while none waits, then run the one the worker sends on stdin."""
    job_waiting = bool(select.select([sys.stdin.fileno()], [], [], 0)[0])
    mode = os.environ.get(SPARE_PRIORITY_ENV, "idle")
    # Started for a job that is already waiting (no spare was ready): no reason to hold back.
    lowest = mode != "normal" and can_lower_threads() and not job_waiting
    may_raise = lowest and may_raise_priority()
    if lowest and not may_raise:
        start_library_threads_here()
    done_read, done_write = os.pipe()
    warm_up = threading.Thread(
        target=warm_up_in_background, args=(lowest, done_write), name="spare-warm-up", daemon=True
    )
    warm_up.start()
    sandbox_ahead = None
    if not _wait_for_warm_up_or_job(done_read):
        warm_up.join()
        sandbox_ahead = _finish_warm_up_here()
    job_dir = _wait_for_job(sandbox_ahead)
    if job_dir is None:  # the worker closed its end: no job came
        if warm_up.is_alive():  # mid-import: leave without the interpreter's teardown
            logging.shutdown()
            os._exit(0)
        return 0
    if warm_up.is_alive():
        _finish_warm_up_for(job_dir, warm_up, may_raise)
    if lowest:  # threads a library started from the warm-up thread, if any
        left = raise_lowered_threads(os.getpid()) if may_raise else lowered_threads(os.getpid())
        if left:
            logger.warning("threads %s of the job's process stay at a lower priority", left)
    return _run_jobs(job_dir, sandbox_ahead)


def _run_jobs(job_dir: Path, sandbox_ahead: ProcessSandbox | None) -> int:
    """Run the job in ``job_dir``, then, while its vLLM engine is kept, the next ones."""
    from service.settings import get_settings
    from workers.training.kept_engine import EngineKeeper

    # This process's engine, kept from job to job where the worker allows it.
    engines = EngineKeeper(may_keep=get_settings().vllm_keep_engine)
    return _take_jobs_while_keeping_engine(run_rank(job_dir, sandbox_ahead, engines), engines)


def serve_forked() -> int:
    """A spare forked from the warm template (``workers.training.spare_template``): the
    imports are done; the rest of a spare's warm-up runs here, at the job's priority, then the
    job the worker sends on stdin."""
    _reseed_like_a_fresh_process()
    logger.info("%s (pid %d)", FORKED_SPARE, os.getpid())
    sandbox_ahead = _finish_warm_up_here()
    job_dir = _wait_for_job(sandbox_ahead)
    return 0 if job_dir is None else _run_jobs(job_dir, sandbox_ahead)


def _finish_warm_up_here() -> ProcessSandbox | None:
    """The warm-up's last part, at the job's priority, on this thread (both start threads the
    job goes on using): torch's first step, and the sandbox started ahead."""
    _warm_first_step()
    gc.freeze()
    sandbox_ahead = _start_sandbox_ahead()
    logger.info(SPARE_READY)
    return sandbox_ahead


def _wait_for_job(sandbox_ahead: ProcessSandbox | None) -> Path | None:
    """The folder of the job the worker sends on stdin; None (the sandbox ahead closed) when
    the worker closes its end instead."""
    line = sys.stdin.readline()
    if line:
        return Path(json.loads(line)["job_dir"])
    if sandbox_ahead is not None:
        sandbox_ahead.close()
    return None


def _reseed_like_a_fresh_process() -> None:
    """numpy seeds its global generator from the OS when imported: a fresh process gets its
    own seed, but every child of the template would share the template's. (Python's ``random``
    reseeds itself in a forked child; torch's default seed is the same fixed one in every
    process until a job seeds it.)"""
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()


def main() -> int:
    die_with_parent()
    configure_logging()
    # A spare is nobody's rank: launch variables inherited from the worker's environment
    # would make its trainer's accelerate state a distributed one, and put every spare's
    # vLLM group on the same port (held for as long as an engine is kept: kept_engine).
    for name in LAUNCH_VARIABLES:
        os.environ.pop(name, None)
    return _run_spare()


if __name__ == "__main__":
    sys.exit(main())
