"""One rank of a training job, in a process of its own (the worker only launches and records).

Started three ways, one code path:

- ``python -m workers.training.rank_process --spare``: a warm process for one-process jobs.
  It imports torch, transformers and TRL ahead of time, then waits on stdin for a job folder.
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
import signal
import sys
from dataclasses import dataclass
from multiprocessing.connection import Client, Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sandbox.process import ProcessSandbox
    from workers.job_sandbox import JobSandbox
    from workers.training.ranks import RankGroup
    from workers.training.spec import TrainingSpec
    from workers.training.step_records import RewardConfig, StepRecord

JOB_FILE = "job.pickle"
WORKER_SOCKET = "worker.sock"
FAILURE_FILE_PREFIX = "failed-rank"
# As Celery formats the worker's own log lines: the ranks write to the worker's log.
LOG_FORMAT = "[%(asctime)s: %(levelname)s/rank%(rank)s] %(message)s"
_PR_SET_PDEATHSIG = 1
# Logged once a spare has imported everything (bench/bench_first_step.py waits for it).
SPARE_READY = "spare training process ready for a job"

logger = logging.getLogger("workers.training.rank_process")


@dataclass
class RankJob:
    """What every rank of one job needs; the worker writes it (pickled) into the job folder."""

    spec: TrainingSpec  # its reward_config carries the job's secrets
    allow_network: bool
    # Runtime packages installed by the worker, added to the sandbox's path.
    packages_path: Path | None
    report_to: list[str]


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
    """

    def __init__(self, worker: Connection | None, sandbox: JobSandbox) -> None:
        self.worker = worker
        self.sandbox = sandbox

    @functools.cached_property
    def ranks(self) -> RankGroup:
        # Known once the trainer has set torch.distributed up, before its first step.
        from workers.training.ranks import RankGroup

        return RankGroup.current()

    def _ask(self, method: str, *args: Any) -> Any:
        assert self.worker is not None, "only rank 0 talks to the worker"
        self.worker.send((method, args))
        return self.worker.recv()

    def poll_reward_config(self, current_version: int, starting_step: int) -> RewardConfig | None:
        config: RewardConfig | None = self.ranks.from_main(
            lambda: self._ask("poll_reward_config", current_version, starting_step)
        )
        if config is not None:
            # The version's secrets (an update may rotate them): this rank's sandbox restarts
            # with them when it loads the version's functions (nothing restarts if unchanged).
            self.sandbox.stage_environment(config.secrets)
        return config

    def should_stop(self) -> str | None:
        reason: str | None = self.ranks.from_main(lambda: self._ask("should_stop"))
        return reason

    def on_step(self, record: StepRecord) -> None:
        if self.ranks.is_main:
            self._ask("on_step", record)

    def on_checkpoint(self, step: int, path: Path) -> None:
        if self.ranks.is_main:
            self._ask("on_checkpoint", step, path)

    def on_config_rejected(self, version: int, message: str) -> None:
        if self.ranks.is_main:
            self._ask("on_config_rejected", version, message)


def _open_sandbox(job: RankJob, started: ProcessSandbox | None = None) -> JobSandbox:
    """The job's sandbox; ``started`` (a spare's, started before the job came) serves as its
    first processes when the job would start exactly the same sandbox, else it is closed."""
    from sandbox.process import ProcessSandbox
    from service.settings import get_settings, sandbox_settings
    from workers.job_sandbox import JobSandbox

    def start(secrets: dict[str, str]) -> ProcessSandbox:
        nonlocal started
        config = sandbox_settings(get_settings(), allow_network=job.allow_network, secrets=secrets)
        if job.packages_path is not None:
            config.extra_python_paths = [job.packages_path]
        if started is not None:
            ahead, started = started, None
            if ahead.settings == config:
                return ahead
            ahead.close()
        return ProcessSandbox(config)

    try:
        return JobSandbox(start, job.spec.reward_config.secrets)
    finally:
        if started is not None:  # the job's sandbox failed to start before it was offered
            started.close()


def _start_sandbox_ahead() -> ProcessSandbox | None:
    """A spare's sandbox for the common job (no network, no secrets, no runtime packages),
    started while no job waits: a sandbox start (the bubblewrap probe, once per process, then
    bwrap and a Python start) is 50-100 ms, far more on a busy machine. Its processes have
    loaded nothing: a job's reward code goes into them as into new ones. None where it cannot
    start; the job then starts its own (and fails saying why)."""
    from sandbox.process import ProcessSandbox
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
    from workers.training.grpo import run_grpo
    from workers.training.trackers import tracker_environment

    # Keep the imports out of Trainer.train()'s gc.collect() (~0.25 s): a spare did this
    # while idle, a rank of torchrun or accelerate launch does it here (no scan, instant).
    gc.freeze()
    rank = int(os.environ.get("RANK", "0"))
    logger.info("rank %d of %s, engine: %s", rank, os.environ.get("WORLD_SIZE", "1"), _engine())
    worker = Client(str(job_dir / WORKER_SOCKET), family="AF_UNIX") if rank == 0 else None
    sandbox: JobSandbox | None = None
    try:
        with open(job_dir / JOB_FILE, "rb") as handle:
            job: RankJob = pickle.load(handle)  # written by our own worker, in a 0700 folder
        ahead, sandbox_ahead = sandbox_ahead, None
        sandbox = _open_sandbox(job, ahead)
        observer = RankObserver(worker, sandbox)
        with tracker_environment(job.report_to, job.spec.reward_config.secrets):
            outcome = run_grpo(job.spec, sandbox, observer)
        if worker is not None:
            worker.send(("finished", (outcome,)))
            worker.recv()
        return 0
    except BaseException as exc:
        logger.exception("rank %d failed", rank)
        from workers.failures import describe_failure

        reason = describe_failure(exc)
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
        if sandbox_ahead is not None:  # the job failed before its sandbox opened
            sandbox_ahead.close()


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
    import workers.training.grpo
    import workers.training.ranks
    import workers.training.trackers  # noqa: F401
    from sandbox.process import ProcessSandbox  # noqa: F401
    from service.settings import sandbox_settings  # noqa: F401
    from workers.job_sandbox import JobSandbox  # noqa: F401


def _warm_first_job() -> None:
    """Pay, while no job waits, what a job's first trainer would otherwise pay on its way to
    step 1 (bench/bench_first_step.py). Nothing here depends on the job, and nothing holds
    memory beyond a module or a table: no model is loaded."""
    import importlib.util

    import torch

    from workers.training.engines import cuda_device_count

    # accelerate imports DeepSpeed whenever it is installed, the first time the trainer asks
    # whether its model is a PEFT model (extract_model_from_parallel). Only without GPUs:
    # DeepSpeed's import probes the CUDA accelerator, which an idle spare must not hold (not
    # verified on a GPU; there 0.1-0.2 s is nothing next to loading the model).
    if cuda_device_count() == 0 and importlib.util.find_spec("deepspeed") is not None:
        import deepspeed  # noqa: F401
    # transformers compiles its table of checkpoint key renamings (~900 regexes, every model
    # type) at the first from_pretrained, and keeps it for the process. An internal API:
    # a transformers without it only loses the head start.
    with contextlib.suppress(Exception):
        from transformers.conversion_mapping import get_checkpoint_conversion_mapping

        get_checkpoint_conversion_mapping("llama")
    # torch's first autograd pass and optimizer step, and its first record_function (TRL
    # profiles every step with one; it imports torch's CUPTI monitor), on a throwaway layer;
    # fork_rng leaves the random state as a fresh process has it.
    with torch.random.fork_rng(devices=[]), torch.autograd.profiler.record_function("warm-up"):
        layer = torch.nn.Linear(8, 8)
        optimizer = torch.optim.AdamW(layer.parameters(), lr=1e-3)
        torch.nn.functional.log_softmax(layer(torch.ones(2, 8)), dim=-1).mean().backward()
        torch.nn.utils.clip_grad_norm_(layer.parameters(), 1.0)
        optimizer.step()
    # The imports left about half a million objects for the cyclic collector to walk, and
    # Trainer.train() runs gc.collect() before its first step (accelerate's free_memory).
    # Freezing them (module-level objects that live as long as the process) takes them out of
    # every later collection; the job's own objects are collected as usual.
    gc.collect()
    gc.freeze()


def main(argv: list[str]) -> int:
    if argv[:1] == ["--exec"]:
        command = argv[2:] if argv[1:2] == ["--"] else argv[1:]
        die_with_parent()
        os.execvp(command[0], command)
    die_with_parent()
    _configure_logging()
    if argv[:1] == ["--spare"]:
        _warm_imports()
        _warm_first_job()
        sandbox_ahead = _start_sandbox_ahead()
        logger.info(SPARE_READY)
        line = sys.stdin.readline()
        if not line:
            if sandbox_ahead is not None:
                sandbox_ahead.close()
            return 0  # the worker closed its end: no job came
        return run_rank(Path(json.loads(line)["job_dir"]), sandbox_ahead)
    return run_rank(Path(argv[0]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
