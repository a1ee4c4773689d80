"""The worker's side of a job's training processes: launch them, answer rank 0, stop them all.

The worker never trains in its own process. One process: a warm spare (torch, transformers
and TRL already imported) takes the job, so a small job pays no start-up. N processes:
torchrun (``--standalone``: a free rendezvous port per job) starts N ranks. Either way the
launched process runs ``workers.training.rank_process`` in a session of its own, dies with
the worker (PR_SET_PDEATHSIG), and rank 0 connects back to the job folder's unix socket; the
worker answers its questions with its own observer (the database, the watcher, the circuit
breaker), so what is recorded and decided is exactly what an in-process run records.

Whatever ends the run (success, a failure, a rank that dies, a database error on the worker's
side), the launcher's process group gets SIGTERM and, after a grace period, SIGKILL: nothing
is left running.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import pickle
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import IO, TYPE_CHECKING, cast

from workers.compiled_caches import torch_extensions_dir
from workers.failures import EngineUnavailable, TrainingProcessError
from workers.training.engines import (
    ACCELERATE_CONFIG,
    ACCELERATE_ENGINES,
    Rendezvous,
    accelerate_config,
    check_engine_available,
)
from workers.training.forked_spares import CannotFork, SpareTemplate, TrainingProcess
from workers.training.observer import TrainingObserver
from workers.training.rank_process import FAILURE_FILE_PREFIX, JOB_FILE, WORKER_SOCKET, RankJob
from workers.training.spare import SPARE_PRIORITY_ENV
from workers.training.thread_priority import can_lower_threads, raise_lowered_threads

if TYPE_CHECKING:
    from workers.training.spec import TrainingOutcome

logger = logging.getLogger(__name__)

RANK_MODULE = "workers.training.rank_process"
SPARE_MODULE = "workers.training.spare"
STOP_GRACE_S = 10.0
# The calls rank 0 may make on the worker's observer.
_OBSERVER_CALLS = frozenset(
    {"poll_reward_config", "should_stop", "on_step", "on_checkpoint", "on_config_rejected"}
)


# Called twice a second while a job's processes run: raises (NodeLost, or
# TrainingProcessError) when they must stop now, e.g. a node of the job was lost.
Watchdog = Callable[[], None]


@dataclass
class _EngineHolder:
    """A one-process job's training process that kept its vLLM engine (kept_engine) and
    waits on stdin for the next job on ``base_model``."""

    process: TrainingProcess
    base_model: str


def _start_rank_process(
    *args: str,
    module: str = RANK_MODULE,
    stdin: int | None = None,
    env: dict[str, str] | None = None,
    own_session: bool = True,
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", module, *args],
        stdin=stdin,
        env=env,
        # Its own session (or, for a spare, its own process group in the worker's session): a
        # signal to the worker's group does not reach it half-way, and the worker stops the
        # whole group itself.
        start_new_session=own_session,
        process_group=None if own_session else 0,
    )


class WarmProcesses:
    """The training processes a worker keeps between jobs: the warm spare (the next
    one-process job's, ``workers.training.spare``) and the process that kept its vLLM engine
    for the next job on the same base model (``workers.training.kept_engine``). One of each
    at most.

    The worker owns one (``workers.lifecycle``, started when it is ready, stopped when it shuts
    down) and hands it to each job's launch. Keep and start processes only from the thread
    that lives as long as the worker (the main thread): their PR_SET_PDEATHSIG fires when the
    thread that started them ends.
    """

    def __init__(self, *, keep_between_jobs: bool = True) -> None:
        # False: processes for one job only (no next spare, no engine kept after it).
        self._keep_between_jobs = keep_between_jobs
        self._spare: TrainingProcess | None = None
        self._engine_holder: _EngineHolder | None = None
        # Where spares are forked (forked_spares): the warm template they come from.
        self._forks_spares = keep_between_jobs and _forks_spares()
        self._template: SpareTemplate | None = None

    def start_spare(self) -> None:
        """Have a warm one-process trainer waiting for the next job (idempotent). Where spares
        are forked and the template still warms up, none yet: ``take_spare`` waits for it."""
        if self._spare is not None and self._spare.poll() is None:
            return
        self._spare = None
        template = self._spare_template()
        if template is not None:
            if template.ready():
                self._spare = self._fork_spare(template)
            return
        self._spare = self._start_new_spare()

    def _start_new_spare(self) -> subprocess.Popen[bytes]:
        return _start_rank_process(
            module=SPARE_MODULE, stdin=subprocess.PIPE, own_session=_spares_in_own_session()
        )

    def _spare_template(self) -> SpareTemplate | None:
        """The template spares are forked from (started if none runs), or None where spares are
        new processes: not forked here, or a template that cannot start on this thread."""
        if not self._forks_spares:
            return None
        if self._template is not None:
            if self._template.usable():
                return self._template
            logger.warning("the spare template exited; starting another")
            self._template.stop()
            self._template = None
        # Its death signal follows the thread that starts it (as a spare's).
        if threading.current_thread() is not threading.main_thread():
            return None
        self._template = SpareTemplate(own_session=_spares_in_own_session())
        return self._template

    def _fork_spare(self, template: SpareTemplate) -> TrainingProcess:
        try:
            return template.fork_spare()
        except CannotFork as why:
            logger.warning("%s: starting a spare of its own", why)
            return self._start_new_spare()

    def stop(self) -> None:
        """Stop the spare and the engine's holder (the worker shuts down)."""
        self.release_engine_holder()
        if self._spare is not None:
            stop_process_group(self._spare, grace_s=2.0)
            self._spare = None
        if self._template is not None:
            self._template.stop()
            self._template = None

    def release_engine_holder(self) -> None:
        """Stop the process that keeps a vLLM engine, giving its memory back (idempotent)."""
        holder, self._engine_holder = self._engine_holder, None
        if holder is not None:
            _stop_holder(holder)

    def send_to_engine_holder(self, job_dir: Path, job: RankJob) -> TrainingProcess | None:
        """The kept engine's process, given the job, when the job can use its engine: a GRPO
        job on the same base model (the process itself checks the rest of the engine's settings
        and starts a new engine when they differ). None otherwise, the holder stopped: every
        other job needs the memory it holds."""
        holder, self._engine_holder = self._engine_holder, None
        if holder is None:
            return None
        fits = job.spec.method == "grpo" and job.spec.base_model == holder.base_model
        if fits and holder.process.poll() is None:
            try:
                _send_job(holder.process, job_dir)
                return holder.process
            except OSError:  # it died between jobs
                logger.warning("the training process that kept a vLLM engine is gone")
        _stop_holder(holder)
        return None

    def keep_engine_holder(self, process: TrainingProcess, base_model: str) -> None:
        """Keep ``process`` (its job done, its engine kept) for the next job on ``base_model``."""
        # Only the thread that lives as long as the worker may keep a process: its death
        # signal follows the thread that started it (a spare, started there too).
        if not self._keep_between_jobs or threading.current_thread() is not threading.main_thread():
            stop_process_group(process)
            return
        self.release_engine_holder()
        self._engine_holder = _EngineHolder(process, base_model)

    def take_spare(self) -> TrainingProcess:
        """The warm spare (started now if none waits), the worker's no longer."""
        self.start_spare()
        if self._spare is None:  # the template warms up: the job waits for it, as for a spare
            template = cast(SpareTemplate, self._template)  # start_spare kept or started it
            if can_lower_threads():
                # Its warm-up thread finishes at the worker's priority, where this worker may.
                with contextlib.suppress(OSError):
                    raise_lowered_threads(template.pid)
            self._spare = self._fork_spare(template)
        spare, self._spare = self._spare, None
        if not isinstance(spare, subprocess.Popen):
            return spare  # forked at the worker's priority
        # The spare warms up at the lowest CPU priority, in a thread of its own (spare.py,
        # "The spare's priority"). A job now waits on it: where this worker may
        # (CAP_SYS_NICE), its threads get the worker's priority back before the job is sent,
        # so a warm-up still under way finishes at the job's priority. Elsewhere the spare
        # sees to it itself.
        if can_lower_threads():
            with contextlib.suppress(OSError):
                raise_lowered_threads(spare.pid)
        return spare

    def start_spare_here(self) -> None:
        """``start_spare``, only from the thread that lives as long as the worker: the spare's
        death signal follows the thread that started it (a test's thread would take it along
        when it ends)."""
        if self._keep_between_jobs and threading.current_thread() is threading.main_thread():
            self.start_spare()


def _spares_in_own_session() -> bool:
    # In the worker's session: a spare's warm-up runs at the lowest CPU priority (SCHED_IDLE,
    # nice 19), which only ranks it below threads of the same scheduling group. With
    # autogroup scheduling (CONFIG_SCHED_AUTOGROUP, on in most distributions' kernels,
    # where the worker is not in a cpu cgroup of its own) every session is such a group,
    # and groups share the CPU evenly: in a session of its own the warm-up took half the
    # CPU from the job it must not slow (bench/README.md, "The spare never slows a running
    # job"). The comparison's "normal" (SPARE_PRIORITY_ENV) starts it as before, in a
    # session of its own.
    return os.environ.get(SPARE_PRIORITY_ENV) == "normal"


def _forks_spares() -> bool:
    """Whether this worker forks its spares from a template (``Settings.spare_fork``)."""
    from service.settings import get_settings
    from workers.training.cuda import driver_lists_gpus

    mode = get_settings().spare_fork
    return mode == "always" or (mode == "auto" and not driver_lists_gpus())


def _stop_holder(holder: _EngineHolder) -> None:
    logger.info("stopping the training process that kept the vLLM engine of %s", holder.base_model)
    stop_process_group(holder.process)


def _send_job(process: TrainingProcess, job_dir: Path) -> None:
    # stdin stays open: a process that keeps its engine reads its next job there.
    stdin = cast(IO[bytes], process.stdin)
    stdin.write(json.dumps({"job_dir": str(job_dir)}).encode() + b"\n")
    stdin.flush()


def _launch(
    job_dir: Path,
    num_processes: int,
    warm: WarmProcesses,
    engine: str = "ddp",
    rendezvous: Rendezvous | None = None,
) -> TrainingProcess:
    """Start this machine's ``num_processes`` ranks; with a rendezvous, this machine's part of
    a job over several (every machine's launcher meets at node 0's address and port)."""
    if engine in ACCELERATE_ENGINES:
        config = job_dir / ACCELERATE_CONFIG
        nodes = rendezvous.num_nodes if rendezvous is not None else 1
        config.write_text(accelerate_config(engine, num_processes * nodes, rendezvous))
        # One machine: a free port per job; several: node 0's port, in the config.
        port = ["--main_process_port", "0"] if rendezvous is None else []
        accelerate = [
            sys.executable, "-m", "accelerate.commands.launch",
            "--config_file", str(config), *port,
            "-m", RANK_MODULE, str(job_dir),
        ]  # fmt: skip
        # DeepSpeed JIT-builds its CPU communication op on first use (minutes): built once
        # per torch/DeepSpeed/Python pins under the user's cache folder, every later job (and
        # every environment with the same pins) loads it.
        env = dict(os.environ)
        if "TORCH_EXTENSIONS_DIR" not in env:
            env["TORCH_EXTENSIONS_DIR"] = str(torch_extensions_dir())
        return _start_rank_process("--exec", "--", *accelerate, env=env)
    warm.release_engine_holder()  # a new process: whatever the holder keeps, this job needs room
    if num_processes == 1 and rendezvous is None:
        spare = warm.take_spare()
        _send_job(spare, job_dir)
        # The next spare starts once this job has recorded its first step (_serve), and warms
        # up at the lowest CPU priority (rank_process): it only takes CPU this job leaves idle.
        return spare
    if rendezvous is None:
        placement = ["--standalone"]  # a free rendezvous port per job
    else:
        placement = [
            f"--nnodes={rendezvous.num_nodes}",
            f"--node_rank={rendezvous.node_rank}",
            f"--master_addr={rendezvous.master_addr}",
            f"--master_port={rendezvous.master_port}",
        ]
    torchrun = [
        sys.executable, "-m", "torch.distributed.run",
        *placement, f"--nproc_per_node={num_processes}",
        "-m", RANK_MODULE, str(job_dir),
    ]  # fmt: skip
    # --exec arms PR_SET_PDEATHSIG in the launcher itself, then becomes torchrun.
    return _start_rank_process("--exec", "--", *torchrun)


def stop_process_group(process: TrainingProcess, grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM the process's group (every rank), SIGKILL what is left after ``grace_s``."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        logger.warning("training processes of group %d ignored SIGTERM; killing", process.pid)
    # Ranks outlive their launcher by a moment; none may outlive the job.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def run_training_processes(
    job: RankJob,
    observer: TrainingObserver,
    *,
    warm: WarmProcesses | None = None,
    num_processes: int = 1,
    engine: str = "ddp",
    rendezvous: Rendezvous | None = None,
    watchdog: Watchdog | None = None,
) -> TrainingOutcome:
    """Train ``job`` (GRPO or SFT) on ``num_processes`` processes; the TrainingOutcome of rank 0.

    ``warm``: the worker's warm processes (its spare, a kept engine's holder); without it a
    spare is started for this job alone and nothing is kept after it.

    With a ``rendezvous`` these are node 0's processes (rank 0 among them) of a job over several
    machines. ``watchdog`` is called twice a second; what it raises (a lost node) ends the run,
    every process here stopped first.
    Raises TrainingProcessError when the processes fail, and whatever the observer raises.
    """
    _check_engine(engine)
    if warm is None:
        own = WarmProcesses(keep_between_jobs=False)
        try:
            return run_training_processes(
                job,
                observer,
                warm=own,
                num_processes=num_processes,
                engine=engine,
                rendezvous=rendezvous,
                watchdog=watchdog,
            )
        finally:
            own.stop()
    one_spare = num_processes == 1 and engine == "ddp" and rendezvous is None
    with tempfile.TemporaryDirectory(prefix="rft-job-") as folder:  # 0700: ours alone
        job_dir = Path(folder)
        (job_dir / JOB_FILE).write_bytes(pickle.dumps(job))
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(job_dir / WORKER_SOCKET))
        listener.listen(1)
        launcher = warm.send_to_engine_holder(job_dir, job) if one_spare else None
        if launcher is None:
            launcher = _launch(job_dir, num_processes, warm, engine, rendezvous)
        kept_engine = False
        try:
            connection = _accept(listener, launcher, watchdog)
            with connection:
                outcome, kept_engine = _serve(
                    connection,
                    launcher,
                    observer,
                    job_dir,
                    after_first_step=warm.start_spare_here if one_spare else None,
                    watchdog=watchdog,
                )
                return outcome
        finally:
            listener.close()
            if kept_engine and one_spare:
                warm.keep_engine_holder(launcher, job.spec.base_model)
            else:
                stop_process_group(launcher)
            if one_spare:
                warm.start_spare_here()  # warm for the next job (if the first step never came)


def run_node_processes(
    job: RankJob,
    *,
    num_processes: int,
    engine: str,
    rendezvous: Rendezvous,
    watchdog: Watchdog,
    warm: WarmProcesses | None = None,
) -> None:
    """This machine's part of a job over several (node 1 and up): start its ranks, which meet
    node 0's, and wait for them. Rank 0 runs on node 0 and its worker records everything;
    here only the processes' end matters. Returns when they all exited cleanly; raises what
    ``watchdog`` raises (processes stopped first), and TrainingProcessError when they fail.
    """
    _check_engine(engine)
    with tempfile.TemporaryDirectory(prefix="rft-job-") as folder:
        job_dir = Path(folder)
        (job_dir / JOB_FILE).write_bytes(pickle.dumps(job))
        # This job's processes need the room a kept engine holds (the worker's own ``warm``).
        launcher = _launch(
            job_dir,
            num_processes,
            warm or WarmProcesses(keep_between_jobs=False),
            engine,
            rendezvous,
        )
        try:
            while launcher.poll() is None:
                _check_watchdog(watchdog)
                time.sleep(0.5)
            logger.info("this node's training processes exited (code %s)", launcher.returncode)
            if launcher.returncode != 0:
                raise _exited(launcher, job_dir)
        finally:
            stop_process_group(launcher)


def _check_watchdog(watchdog: Watchdog | None) -> None:
    if watchdog is not None:
        watchdog()


def _check_engine(engine: str) -> None:
    try:
        check_engine_available(engine)
    except EngineUnavailable as exc:
        raise TrainingProcessError(str(exc)) from None


def _accept(
    listener: socket.socket, launcher: TrainingProcess, watchdog: Watchdog | None = None
) -> Connection:
    listener.settimeout(0.5)
    while True:
        try:
            client, _ = listener.accept()
        except TimeoutError:
            _check_watchdog(watchdog)
            if launcher.poll() is not None:
                raise TrainingProcessError(
                    f"the training processes exited (code {launcher.returncode}) before "
                    "starting; see the worker's log"
                ) from None
            continue
        client.settimeout(None)
        return Connection(client.detach())


def _serve(
    connection: Connection,
    launcher: TrainingProcess,
    observer: TrainingObserver,
    job_dir: Path,
    after_first_step: Callable[[], None] | None = None,
    watchdog: Watchdog | None = None,
) -> tuple[TrainingOutcome, bool]:
    """Answer rank 0 until the run ends: its outcome, and whether its process kept its vLLM
    engine for the next job (and waits for it on stdin)."""
    while True:
        if not connection.poll(0.5):
            _check_watchdog(watchdog)
            if launcher.poll() is not None:
                raise _exited(launcher, job_dir)
            continue
        try:
            method, args = connection.recv()
        except EOFError:
            raise _exited(launcher, job_dir) from None
        if method == "finished":
            connection.send(None)
            outcome: TrainingOutcome = args[0]
            return outcome, bool(args[1:] and args[1])
        if method == "failed":
            raise TrainingProcessError(args[0])
        if method not in _OBSERVER_CALLS:
            raise TrainingProcessError(f"rank 0 made an unknown call {method!r}")
        connection.send(getattr(observer, method)(*args))
        if method == "on_step" and after_first_step is not None:
            # Once rank 0 has its answer: it trains on while the next spare starts.
            after_first_step()
            after_first_step = None


def _exited(launcher: TrainingProcess, job_dir: Path) -> TrainingProcessError:
    deadline = time.monotonic() + 5
    while launcher.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    # A rank that failed with an exception said why; one that was killed did not.
    for failure in sorted(job_dir.glob(f"{FAILURE_FILE_PREFIX}*")):
        rank = failure.name.removeprefix(FAILURE_FILE_PREFIX)
        return TrainingProcessError(f"rank {rank}: {failure.read_text()}")
    code = launcher.returncode
    return TrainingProcessError(
        "a training process ended before the run did"
        + (f" (exit code {code})" if code is not None else "")
        + "; see the worker's log"
    )
