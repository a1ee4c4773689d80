"""One rank of a training job, in a process of its own (the worker only launches and records).

Started three ways, one code path (``run_rank``):

- ``python -m workers.training.spare``: a warm process for one-process jobs
  (``workers.training.spare``), which runs its job here as rank 0 of one.
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
import faulthandler
import functools
import gc
import logging
import os
import pickle
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

    from sandbox.agent_api import AgentSandbox
    from sandbox.reward_host import ProcessSandbox
    from sandbox.settings import SandboxSettings
    from workers.job_sandbox import JobAgentSandbox, JobRewardSandbox
    from workers.training.kept_engine import EngineKeeper
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
MODULE = "workers.training.rank_process"  # as the worker starts it (python -m)
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

    def sandbox_settings(self, secrets: dict[str, str]) -> SandboxSettings:
        """Where the job's user code runs (reward functions; tools and environments): this
        deployment's limits, the network only as the job allows, ``secrets`` in the
        environment, the job's runtime packages on the path."""
        from service.settings import get_settings, sandbox_settings

        settings = sandbox_settings(
            get_settings(),
            allow_network=self.allow_network,
            secrets=secrets,
            egress_hosts=self.egress_hosts,
        )
        if self.packages_path is not None:
            settings.extra_python_paths = [self.packages_path]
        return settings


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
    from workers.job_sandbox import JobRewardSandbox

    def start(secrets: dict[str, str]) -> ProcessSandbox:
        nonlocal started
        config = job.sandbox_settings(secrets)
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
    from workers.job_sandbox import JobAgentSandbox

    limits = AgentLimits(tool_timeout_s=job.spec.hyperparameters.tool_timeout_s)

    def start(secrets: dict[str, str]) -> AgentSandbox:
        return create_agent_sandbox(job.sandbox_settings(secrets), limits)

    return JobAgentSandbox(start, config.secrets)


def run_rank(
    job_dir: Path,
    sandbox_ahead: ProcessSandbox | None = None,
    engines: EngineKeeper | None = None,
) -> int:
    """Train this rank's part of the job in ``job_dir``; the exit status of the process.

    ``sandbox_ahead``: a sandbox started before the job came (a spare's), used if it fits.
    ``engines``: the process's kept vLLM engine, owned by the caller (a spare's, kept from job
    to job); without it this rank keeps no engine beyond the job.
    """
    from multiprocessing.connection import Client  # not at the top: a spare starts lighter

    from workers.training.grpo import run_grpo
    from workers.training.kept_engine import EngineKeeper
    from workers.training.trackers import tracker_environment

    # Keep the imports out of Trainer.train()'s gc.collect() (~0.25 s): a spare did this
    # while idle, a rank of torchrun or accelerate launch does it here (no scan, instant).
    gc.freeze()
    rank = int(os.environ.get("RANK", "0"))
    engines = engines if engines is not None else EngineKeeper()
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
                    outcome = run_grpo(job.spec, sandbox, observer, agent_sandbox, engines=engines)
        finally:
            if agent_sandbox is not None:
                agent_sandbox.close()
        if worker is not None:
            # Whether this process kept its vLLM engine and waits for the next job (kept_engine).
            observer.finish(outcome, engines.kept_model() is not None)
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


def _engine() -> str:
    """What the launcher set up: accelerate's DeepSpeed and FSDP launchers say so in the
    environment (the Trainer reads the same variables), torchrun and the spare do not."""
    if os.environ.get("ACCELERATE_USE_DEEPSPEED", "").lower() == "true":
        return f"deepspeed ZeRO-{os.environ.get('ACCELERATE_DEEPSPEED_ZERO_STAGE', '?')}"
    if os.environ.get("ACCELERATE_USE_FSDP", "").lower() == "true":
        return f"fsdp (FSDP{os.environ.get('FSDP_VERSION', '?')})"
    return "ddp"


def configure_logging() -> None:
    # A crash in native code (a signal, an abort) prints every thread's Python stack to stderr,
    # the worker's log: what the job's failure reason alone cannot say.
    faulthandler.enable()
    rank = os.environ.get("RANK", "0")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(LOG_FORMAT.replace("%(rank)s", rank)))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)


def main(argv: list[str]) -> int:
    if argv[:1] == ["--exec"]:
        command = argv[2:] if argv[1:2] == ["--"] else argv[1:]
        die_with_parent()
        os.execvp(command[0], command)
    die_with_parent()
    configure_logging()
    return run_rank(Path(argv[0]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
