"""One rank of a training job, in a process of its own (the worker only launches and records).

Started three ways, one code path:

- ``python -m workers.training.rank_process --spare``: a warm process for one-process jobs.
  It imports torch, transformers and TRL ahead of time (in a thread at the lowest CPU
  priority: "The spare's priority" below), then waits on stdin for a job folder.
- ``python -m workers.training.rank_process JOB_DIR``: one rank under torchrun (N processes).
- ``python -m workers.training.rank_process --exec -- CMD...``: ties CMD (torchrun) to its
  parent's life, then becomes it.

Every process sets PR_SET_PDEATHSIG, so a lost worker (or torchrun) takes its ranks along.
Rank 0 talks to the worker over the job folder's unix socket (``WORKER_SOCKET``): it asks the
worker's observer what to do (reward config, stop) and sends each step's record; the other
ranks get rank 0's answers through the collectives in ``workers.training.ranks``.

This module imports nothing heavy at its top: ``--exec`` must be quick.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import gc
import json
import logging
import os
import pickle
import select
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

    from sandbox.agent_api import AgentSandbox
    from sandbox.reward_host import ProcessSandbox
    from workers.job_sandbox import JobAgentSandbox, JobRewardSandbox
    from workers.training.ranks import RankGroup
    from workers.training.spec import TrainingOutcome, TrainingSpec
    from workers.training.step_records import RewardConfig, StepRecord

JOB_FILE = "job.pickle"
WORKER_SOCKET = "worker.sock"
FAILURE_FILE_PREFIX = "failed-rank"
# How long a failing rank of several waits before reporting (see run_rank): torchrun takes
# up to ~2 s to notice a rank that died and stop the others.
PEER_FAILURE_GRACE_S = 3.0
# As Celery formats the worker's own log lines: the ranks write to the worker's log.
LOG_FORMAT = "[%(asctime)s: %(levelname)s/rank%(rank)s] %(message)s"
_PR_SET_PDEATHSIG = 1
# Logged once a spare has imported everything (bench/bench_first_step.py waits for it).
SPARE_READY = "spare training process ready for a job"
_MODULE = "workers.training.rank_process"  # as the worker starts it (python -m)
# What torchrun (and TRL, for vLLM's group) set for a rank of a launched job.
LAUNCH_VARIABLES = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
)

logger = logging.getLogger("workers.training.rank_process")


@dataclass
class RankJob:
    """What every rank of one job needs; the worker writes it (pickled) into the job folder."""

    spec: TrainingSpec  # its reward_config carries the job's secrets
    allow_network: bool
    # Runtime packages installed by the worker, added to the sandbox's path.
    packages_path: Path | None
    report_to: list[str]
    # Without allow_network: the only hosts its sandboxes may reach (HTTP tools, endpoint
    # grader).
    egress_hosts: list[str] = field(default_factory=list)


def die_with_parent() -> None:
    """SIGTERM this process when the thread that started it ends (its parent's, as a rule)."""
    parent = os.getppid()
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the signal was armed
        os._exit(1)


class RankObserver:
    """The TrainingObserver every rank's StepReporter calls.

    Rank 0 forwards each call to the worker's observer and waits for its answer; decisions
    (a reward config, a stop) then reach every rank through a broadcast at the same step
    boundary. Records, checkpoints and rejections are sent by rank 0 only.

    A step's record (``on_step``, answered with None) is not waited for: the worker answers
    calls in order, so the next question (``should_stop``, asked right after it) reads both
    answers, and its answer still follows the record (a guard's pause applies at that step).
    One round trip per step less for the training thread; a worker that failed on the record
    closes the connection, which the next call meets as before.
    """

    def __init__(
        self,
        worker: Connection | None,
        sandbox: JobRewardSandbox | None,
        agent_sandbox: JobAgentSandbox | None = None,
    ) -> None:
        self.worker = worker
        self.sandbox = sandbox
        self.agent_sandbox = agent_sandbox
        self._unread_answers = 0  # sent with _tell, answered (None) but not yet read

    @functools.cached_property
    def ranks(self) -> RankGroup:
        # Known once the trainer has set torch.distributed up, before its first step.
        from workers.training.ranks import RankGroup

        return RankGroup.current()

    def _ask(self, method: str, *args: Any) -> Any:
        assert self.worker is not None, "only rank 0 talks to the worker"
        self.worker.send((method, args))
        while self._unread_answers:
            self.worker.recv()
            self._unread_answers -= 1
        return self.worker.recv()

    def _tell(self, method: str, *args: Any) -> None:
        """A call whose answer is None: sent now, its answer read by the next ``_ask``."""
        assert self.worker is not None, "only rank 0 talks to the worker"
        self.worker.send((method, args))
        self._unread_answers += 1

    def finish(self, outcome: TrainingOutcome, keeps_engine: bool) -> None:
        """Rank 0's last call: the run's outcome, and whether this process kept its engine."""
        self._ask("finished", outcome, keeps_engine)

    def poll_reward_config(self, current_version: int, starting_step: int) -> RewardConfig | None:
        config: RewardConfig | None = self.ranks.from_main(
            lambda: self._ask("poll_reward_config", current_version, starting_step)
        )
        if config is not None:
            # The version's secrets (an update may rotate them): this rank's sandboxes restart
            # with them when they load the version's code (nothing restarts if unchanged).
            for sandbox in (self.sandbox, self.agent_sandbox):
                if sandbox is not None:
                    sandbox.stage_environment(config.secrets)
        return config

    def should_stop(self) -> str | None:
        reason: str | None = self.ranks.from_main(lambda: self._ask("should_stop"))
        return reason

    def on_step(self, record: StepRecord) -> None:
        if self.ranks.is_main:
            self._tell("on_step", record)

    def on_checkpoint(self, step: int, path: Path) -> None:
        if self.ranks.is_main:
            self._ask("on_checkpoint", step, path)

    def on_config_rejected(self, version: int, message: str) -> None:
        if self.ranks.is_main:
            self._ask("on_config_rejected", version, message)


def _open_sandbox(job: RankJob, started: ProcessSandbox | None = None) -> JobRewardSandbox:
    """The job's sandbox; ``started`` (a spare's, started before the job came) serves as its
    first processes when the job would start exactly the same sandbox, else it is closed."""
    from sandbox.reward_host import ProcessSandbox
    from service.settings import get_settings, sandbox_settings
    from workers.job_sandbox import JobRewardSandbox

    def start(secrets: dict[str, str]) -> ProcessSandbox:
        nonlocal started
        config = sandbox_settings(
            get_settings(),
            allow_network=job.allow_network,
            secrets=secrets,
            egress_hosts=job.egress_hosts,
        )
        if job.packages_path is not None:
            config.extra_python_paths = [job.packages_path]
        if started is not None:
            ahead, started = started, None
            if ahead.settings == config:
                return ahead
            ahead.close()
        return ProcessSandbox(config)

    try:
        return JobRewardSandbox(start, job.spec.reward_config.secrets)
    finally:
        if started is not None:  # the job's sandbox failed to start before it was offered
            started.close()


def _open_agent_sandbox(job: RankJob) -> JobAgentSandbox | None:
    """Where an agent job's tools and environments run: a sandbox of its own beside the reward
    sandbox, under the same rules (network only if the job allows it, the job's secrets, its
    packages, the same limits), restarted with new secrets as the reward sandbox is. None for
    a job without tools or environments."""
    config = job.spec.reward_config
    if not (config.tools or config.environments):
        return None
    from sandbox.agent_api import AgentLimits
    from sandbox.agent_host import create_agent_sandbox
    from service.settings import get_settings, sandbox_settings
    from workers.job_sandbox import JobAgentSandbox

    limits = AgentLimits(tool_timeout_s=job.spec.hyperparameters.tool_timeout_s)

    def start(secrets: dict[str, str]) -> AgentSandbox:
        settings = sandbox_settings(
            get_settings(),
            allow_network=job.allow_network,
            secrets=secrets,
            egress_hosts=job.egress_hosts,
        )
        if job.packages_path is not None:
            settings.extra_python_paths = [job.packages_path]
        return create_agent_sandbox(settings, limits)

    return JobAgentSandbox(start, config.secrets)


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


def run_rank(job_dir: Path, sandbox_ahead: ProcessSandbox | None = None) -> int:
    """Train this rank's part of the job in ``job_dir``; the exit status of the process.

    ``sandbox_ahead``: a sandbox started before the job came (a spare's), used if it fits.
    """
    from multiprocessing.connection import Client  # not at the top: a spare starts lighter

    from workers.training.grpo import run_grpo
    from workers.training.trackers import tracker_environment

    # Keep the imports out of Trainer.train()'s gc.collect() (~0.25 s): a spare did this
    # while idle, a rank of torchrun or accelerate launch does it here (no scan, instant).
    gc.freeze()
    rank = int(os.environ.get("RANK", "0"))
    engine = _engine()
    logger.info("rank %d of %s, engine: %s", rank, os.environ.get("WORLD_SIZE", "1"), engine)
    if engine.startswith("deepspeed"):
        from workers.compiled_caches import adopt_built_deepspeed_ops

        for name in adopt_built_deepspeed_ops():
            logger.info("DeepSpeed op %s: built earlier for these pins, loaded", name)
    worker = Client(str(job_dir / WORKER_SOCKET), family="AF_UNIX") if rank == 0 else None
    sandbox: JobRewardSandbox | None = None
    try:
        with open(job_dir / JOB_FILE, "rb") as handle:
            job: RankJob = pickle.load(handle)  # written by our own worker, in a 0700 folder
        supervised = job.spec.method == "sft"  # no reward code runs: no sandbox to start
        if not supervised:
            ahead, sandbox_ahead = sandbox_ahead, None
            sandbox = _open_sandbox(job, ahead)
        agent_sandbox = _open_agent_sandbox(job)
        observer = RankObserver(worker, sandbox, agent_sandbox)
        try:
            with tracker_environment(job.report_to, job.spec.reward_config.secrets):
                if sandbox is None:
                    from workers.training.sft import run_sft

                    outcome = run_sft(job.spec, observer)
                else:
                    outcome = run_grpo(job.spec, sandbox, observer, agent_sandbox)
        finally:
            if agent_sandbox is not None:
                agent_sandbox.close()
        if worker is not None:
            # Whether this process kept its vLLM engine and waits for the next job (kept_engine).
            observer.finish(outcome, _keeps_engine())
        return 0
    except BaseException as exc:
        logger.exception("rank %d failed", rank)
        from workers.failures import describe_failure

        reason = describe_failure(exc)
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            # A rank that died (killed, out of memory) fails the others' collectives at once
            # ("Connection closed by peer"): that is not their story. The launcher notices the
            # dead rank within a second or two and stops the rest; give it that long before
            # speaking, so the job's reason names the rank that really ended the run.
            time.sleep(PEER_FAILURE_GRACE_S)
        # Another rank's failure reaches the worker only as torchrun's exit: leave the reason
        # where the worker looks when that happens.
        with contextlib.suppress(OSError):
            (job_dir / f"{FAILURE_FILE_PREFIX}{rank}").write_text(reason)
        if worker is not None:
            with contextlib.suppress(OSError):
                worker.send(("failed", (reason,)))
        return 1
    finally:
        if sandbox is not None:
            sandbox.close()
        if sandbox_ahead is not None:  # unused: a supervised job, or one failed before its own
            sandbox_ahead.close()


def _keeps_engine() -> bool:
    from workers.training import kept_engine

    return kept_engine.kept_model() is not None


def _take_jobs_while_keeping_engine(status: int) -> int:
    """After a spare's job: while its vLLM engine is kept, run the jobs the worker sends on
    stdin (the same base model's, launch._send_to_engine_holder). Ends, the engine shut down,
    when the worker closes stdin or a job fails; the worker stops the process otherwise."""
    from workers.training import kept_engine

    while status == 0 and kept_engine.kept_model() is not None:
        line = sys.stdin.readline()
        if not line:
            break
        status = run_rank(Path(json.loads(line)["job_dir"]))
    kept_engine.release_kept()
    return status


def _engine() -> str:
    """What the launcher set up: accelerate's DeepSpeed and FSDP launchers say so in the
    environment (the Trainer reads the same variables), torchrun and the spare do not."""
    if os.environ.get("ACCELERATE_USE_DEEPSPEED", "").lower() == "true":
        return f"deepspeed ZeRO-{os.environ.get('ACCELERATE_DEEPSPEED_ZERO_STAGE', '?')}"
    if os.environ.get("ACCELERATE_USE_FSDP", "").lower() == "true":
        return f"fsdp (FSDP{os.environ.get('FSDP_VERSION', '?')})"
    return "ddp"


def _configure_logging() -> None:
    rank = os.environ.get("RANK", "0")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(LOG_FORMAT.replace("%(rank)s", rank)))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)


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
# its session (launch.start_spare: with autogroup scheduling a session of its own would
# share the CPU evenly with the job's). "normal" keeps the warm-up at the worker's priority,
# and the spare in a session of its own, as before issue 22: for comparisons
# (bench/bench_spare_priority.py) and for tests that cannot wait for an idle CPU.
SPARE_PRIORITY_ENV = "RFT_SPARE_WARM_UP_PRIORITY"
# A job that comes before the warm-up ended, in a process that cannot raise the warm-up thread:
# waited for while the thread gets CPU; if it runs for less than this share of a window while
# it waits for a CPU for more than half of it (other processes hold every CPU), the spare
# starts the job in a fresh process image at its own priority instead (exec: same pid).
_STARVED_RUN_SHARE = 0.1
_STARVED_WINDOW_S = 0.5


@dataclass(frozen=True)
class ThreadPriority:
    """A thread's CPU priority as Linux keeps it (per thread): scheduling policy and nice."""

    policy: int
    nice: int
    rt_priority: int = 0

    @classmethod
    def of(cls, tid: int) -> ThreadPriority:
        return cls(
            os.sched_getscheduler(tid),
            os.getpriority(os.PRIO_PROCESS, tid),
            os.sched_getparam(tid).sched_priority,
        )

    def apply(self, tid: int) -> None:
        """Give thread ``tid`` this priority; PermissionError where raising it is not allowed."""
        if self.policy == getattr(os, "SCHED_IDLE", None):  # lowering: nice first, then idle
            os.setpriority(os.PRIO_PROCESS, tid, self.nice)
            os.sched_setscheduler(tid, self.policy, os.sched_param(self.rt_priority))
        else:  # raising: the policy (out of SCHED_IDLE), then nice
            os.sched_setscheduler(tid, self.policy, os.sched_param(self.rt_priority))
            os.setpriority(os.PRIO_PROCESS, tid, self.nice)


def lowest_priority() -> ThreadPriority:
    return ThreadPriority(os.SCHED_IDLE, 19)


def can_lower_threads() -> bool:
    """Linux only: elsewhere nice applies to the whole process, and the job would keep it."""
    return sys.platform.startswith("linux") and hasattr(os, "SCHED_IDLE")


def thread_priorities(pid: int) -> dict[int, ThreadPriority]:
    """Every thread of process ``pid`` (its main thread's id is ``pid``) and its priority."""
    found = {}
    for name in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError):  # a thread that just ended
            found[int(name)] = ThreadPriority.of(int(name))
    return found


def lowered_threads(pid: int) -> list[int]:
    """The threads of process ``pid`` whose priority is not its main thread's."""
    threads = thread_priorities(pid)
    normal = threads.pop(pid, None)
    return [tid for tid, priority in threads.items() if normal is not None and priority != normal]


def raise_lowered_threads(pid: int) -> list[int]:
    """Give every thread of ``pid`` below its main thread's priority that priority again (as
    far as this process is allowed); the threads left lower."""
    normal = ThreadPriority.of(pid)
    left = []
    for tid in lowered_threads(pid):
        try:
            normal.apply(tid)
        except PermissionError:
            left.append(tid)
        except OSError:  # ProcessLookupError: it ended
            pass
    return left


def _may_raise_priority() -> bool:
    """Whether this process may raise a thread from the lowest priority back to its own
    (CAP_SYS_NICE, or RLIMIT_NICE): tried on a throwaway thread."""
    normal = ThreadPriority.of(threading.get_native_id())
    allowed: list[bool] = []

    def probe() -> None:
        tid = threading.get_native_id()
        try:
            lowest_priority().apply(tid)
            normal.apply(tid)
            allowed.append(True)
        except OSError:
            allowed.append(False)

    thread = threading.Thread(target=probe, name="spare-priority-probe")
    thread.start()
    thread.join()
    return allowed == [True]


# Shared libraries that start threads of their own when loaded, where their packages' wheels
# bundle them (the glob is relative to the package's site directory): numpy's OpenBLAS (its
# thread pool) and pyarrow's libarrow (jemalloc's background thread).
_THREAD_STARTING_LIBRARIES = (
    ("numpy", "numpy.libs/*openblas*.so*"),
    ("pyarrow", "pyarrow/libarrow.so*"),
)


def _start_library_threads_here() -> None:
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


def _warm_up_in_background(lowest: bool, done: int) -> None:
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
            os.execv(sys.executable, [sys.executable, "-m", _MODULE, str(job_dir)])
        before = now


def _run_spare() -> int:
    """Warm up for a job while none waits, then run the one the worker sends on stdin."""
    job_waiting = bool(select.select([sys.stdin.fileno()], [], [], 0)[0])
    mode = os.environ.get(SPARE_PRIORITY_ENV, "idle")
    # Started for a job that is already waiting (no spare was ready): no reason to hold back.
    lowest = mode != "normal" and can_lower_threads() and not job_waiting
    may_raise = lowest and _may_raise_priority()
    if lowest and not may_raise:
        _start_library_threads_here()
    done_read, done_write = os.pipe()
    warm_up = threading.Thread(
        target=_warm_up_in_background, args=(lowest, done_write), name="spare-warm-up", daemon=True
    )
    warm_up.start()
    sandbox_ahead = None
    if not _wait_for_warm_up_or_job(done_read):
        warm_up.join()
        # At the job's priority, on this thread (both start threads the job goes on using).
        _warm_first_step()
        gc.freeze()
        sandbox_ahead = _start_sandbox_ahead()
        logger.info(SPARE_READY)
    line = sys.stdin.readline()
    if not line:  # the worker closed its end: no job came
        if sandbox_ahead is not None:
            sandbox_ahead.close()
        if warm_up.is_alive():  # mid-import: leave without the interpreter's teardown
            logging.shutdown()
            os._exit(0)
        return 0
    job_dir = Path(json.loads(line)["job_dir"])
    if warm_up.is_alive():
        _finish_warm_up_for(job_dir, warm_up, may_raise)
    if lowest:  # threads a library started from the warm-up thread, if any
        left = raise_lowered_threads(os.getpid()) if may_raise else lowered_threads(os.getpid())
        if left:
            logger.warning("threads %s of the job's process stay at a lower priority", left)
    from service.settings import get_settings

    if get_settings().vllm_keep_engine:
        from workers.training import kept_engine

        kept_engine.allow_keeping()
    return _take_jobs_while_keeping_engine(run_rank(job_dir, sandbox_ahead))


def main(argv: list[str]) -> int:
    if argv[:1] == ["--exec"]:
        command = argv[2:] if argv[1:2] == ["--"] else argv[1:]
        die_with_parent()
        os.execvp(command[0], command)
    die_with_parent()
    _configure_logging()
    if argv[:1] == ["--spare"]:
        # A spare is nobody's rank: launch variables inherited from the worker's environment
        # would make its trainer's accelerate state a distributed one, and put every spare's
        # vLLM group on the same port (held for as long as an engine is kept: kept_engine).
        for name in LAUNCH_VARIABLES:
            os.environ.pop(name, None)
        return _run_spare()
    return run_rank(Path(argv[0]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
