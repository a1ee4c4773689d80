"""The warm spare training process (workers.training.spare): what it prepares
before a job comes must change nothing a job sees, and it leaves nothing running."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pickle
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from pathlib import Path

import pytest

from sandbox.api import RewardFunctionSpec, ScoringBatch
from tests.layers import skip_missing_layer
from tests.processes import alive, descendants
from workers.job_sandbox import JobRewardSandbox
from workers.training.rank_process import JOB_FILE, WORKER_SOCKET, RankJob, _open_sandbox
from workers.training.spare import SPARE_READY, _start_sandbox_ahead, starved
from workers.training.spec import TrainingSpec
from workers.training.step_records import StepRecord
from workers.training.thread_priority import (
    ThreadPriority,
    can_lower_threads,
    lowered_threads,
    lowest_priority,
    may_raise_priority,
    raise_lowered_threads,
    thread_priorities,
)

from .harness import RecordingObserver

REPO_ROOT = Path(__file__).resolve().parents[2]
SECRET_LENGTH = RewardFunctionSpec(
    "secret_length",
    "import os\n\ndef secret_length(prompt, completion, example):\n"
    "    return float(len(os.environ.get('RFT_TEST_SECRET', '')))\n",
)


def rank_job(spec: TrainingSpec, secrets: dict[str, str] | None = None) -> RankJob:
    # The job's secrets travel with its reward config.
    config = dataclasses.replace(spec.reward_config, secrets=secrets or {})
    return RankJob(
        spec=dataclasses.replace(spec, reward_config=config),
        allow_network=False,
        packages_path=None,
        report_to=[],
    )


def score_one(sandbox: JobRewardSandbox) -> float | None:
    batch = ScoringBatch(prompts=["p"], completions=["c"], examples=[{"prompt": "p"}])
    result = sandbox.score(batch)[SECRET_LENGTH.name]
    assert not result.errors, result.errors
    return result.scores[0]


def test_a_common_job_takes_the_sandbox_started_ahead(
    make_spec: Callable[..., TrainingSpec],
) -> None:
    ahead = _start_sandbox_ahead()
    assert ahead is not None
    sandbox = _open_sandbox(rank_job(make_spec()), ahead)
    try:
        sandbox.load([SECRET_LENGTH])
        # The job's functions went into the processes started ahead: they are the job's.
        assert [spec.name for spec in ahead.functions] == [SECRET_LENGTH.name]
        assert score_one(sandbox) == 0.0
    finally:
        sandbox.close()


def test_a_job_with_secrets_starts_its_own_sandbox_and_the_one_ahead_is_closed(
    make_spec: Callable[..., TrainingSpec],
) -> None:
    ahead = _start_sandbox_ahead()
    assert ahead is not None
    sandbox = _open_sandbox(rank_job(make_spec(), secrets={"RFT_TEST_SECRET": "12345"}), ahead)
    try:
        sandbox.load([SECRET_LENGTH])
        # The job's code sees its secret: it runs in processes started with it.
        assert score_one(sandbox) == 5.0
        with pytest.raises(RuntimeError, match="closed"):
            ahead.load([SECRET_LENGTH])
    finally:
        sandbox.close()


def test_the_spare_warms_up_without_touching_the_random_state_and_leaves_nothing_behind(
    tmp_path: Path,
) -> None:
    # The warm-up runs torch ops; a job trains from the random state a fresh process has.
    probe = (
        "import sys, gc, torch\n"
        "from workers.training import spare as rp\n"
        "rp._warm_imports()\n"
        "state = torch.random.get_rng_state().clone()\n"
        "rp._warm_first_job()\n"
        "assert torch.equal(torch.random.get_rng_state(), state), 'random state changed'\n"
        "assert gc.get_freeze_count() > 0\n"
        "print('ok')\n"
    )
    checked = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert checked.stdout.strip().endswith("ok"), checked.stderr[-3000:]

    log = tmp_path / "spare.log"
    with open(log, "wb") as stderr:
        spare = subprocess.Popen(
            [sys.executable, "-m", "workers.training.spare"],
            cwd=REPO_ROOT,
            stdin=subprocess.PIPE,
            stderr=stderr,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 600
        while SPARE_READY not in log.read_text(errors="replace"):
            assert spare.poll() is None, log.read_text(errors="replace")[-3000:]
            assert time.monotonic() < deadline, "the spare never became ready"
            time.sleep(0.2)
        started_ahead = descendants(spare.pid)
        assert started_ahead, "no sandbox process was started ahead of a job"
        # The worker closes its end without a job (it stops): the spare and its sandbox go.
        assert spare.stdin is not None
        spare.stdin.close()
        assert spare.wait(timeout=60) == 0
        deadline = time.monotonic() + 30
        while any(alive(pid) for pid in started_ahead):
            assert time.monotonic() < deadline, "the spare's sandbox outlived it"
            time.sleep(0.1)
    finally:
        if spare.poll() is None:
            os.killpg(spare.pid, 9)
            spare.wait()


# The spare's priority (issue 22): its warm-up runs in a thread at the lowest CPU priority, so
# that it never slows the job that trains meanwhile; the job it takes trains at the priority
# the worker gave it, every thread of it. "privileged": as root here (CAP_SYS_NICE, which lets
# a process raise a thread again); "unprivileged": without CAP_SYS_NICE, as a Docker container
# runs by default (setpriv drops it; a non-root run is unprivileged already).
WITHOUT_SYS_NICE = ["setpriv", "--inh-caps=-sys_nice", "--bounding-set=-sys_nice"]
FRESH_PROCESS = "starting the job in a fresh process"


def spare_command(privileged: bool) -> list[str]:
    if not can_lower_threads():
        skip_missing_layer("per-thread priorities are Linux's")
    command = [sys.executable, "-m", "workers.training.spare"]
    if privileged == may_raise_priority():
        return command
    if privileged or os.geteuid() != 0 or shutil.which("setpriv") is None:
        skip_missing_layer("needs root (with CAP_SYS_NICE) and setpriv")
    return WITHOUT_SYS_NICE + command


@contextlib.contextmanager
def spare_process(command: list[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with open(log, "wb") as stderr:
        spare = subprocess.Popen(
            command,
            cwd=REPO_ROOT,
            stdin=subprocess.PIPE,
            stderr=stderr,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
            # In this session, as the worker starts it (launch.WarmProcesses.start_spare).
            process_group=0,
        )
    try:
        yield spare
    finally:
        if spare.poll() is None:
            os.killpg(spare.pid, 9)
            spare.wait()


def wait_until(condition: Callable[[], bool], spare: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 600
    while not condition():
        assert spare.poll() is None, log.read_text(errors="replace")[-3000:]
        assert time.monotonic() < deadline, log.read_text(errors="replace")[-3000:]
        time.sleep(0.05)


def warming_up_at_the_lowest_priority(pid: int) -> bool:
    with contextlib.suppress(OSError):
        return lowest_priority() in thread_priorities(pid).values()
    return False


class PriorityObserver(RecordingObserver):
    """Reads the priority of every thread of the job's process at each step."""

    def __init__(self, pid: int) -> None:
        super().__init__()
        self.pid = pid
        self.seen: list[dict[int, ThreadPriority]] = []

    def on_step(self, record: StepRecord) -> None:
        self.seen.append(thread_priorities(self.pid))
        super().on_step(record)


def train_in(
    spare: subprocess.Popen[bytes],
    job: RankJob,
    folder: Path,
    log: Path,
    until_connected: Callable[[], None] = lambda: None,
) -> PriorityObserver:
    """Send ``job`` to ``spare`` and answer its rank 0 as the worker would (launch._serve);
    ``until_connected`` is called every second until rank 0 connects."""
    (folder / JOB_FILE).write_bytes(pickle.dumps(job))
    observer = PriorityObserver(spare.pid)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(folder / WORKER_SOCKET))
        listener.listen(1)
        listener.settimeout(1)
        assert spare.stdin is not None
        spare.stdin.write(json.dumps({"job_dir": str(folder)}).encode() + b"\n")
        spare.stdin.close()
        client = None
        while client is None:
            with contextlib.suppress(TimeoutError):
                client, _ = listener.accept()
            until_connected()
            assert spare.poll() is None, log.read_text(errors="replace")[-3000:]
        client.settimeout(None)
        with Connection(client.detach()) as connection:
            while True:
                while not connection.poll(1):
                    assert spare.poll() is None, log.read_text(errors="replace")[-3000:]
                method, args = connection.recv()
                if method == "finished":
                    connection.send(None)
                    break
                assert method != "failed", args[0]
                connection.send(getattr(observer, method)(*args))
    assert spare.wait(timeout=120) == 0, log.read_text(errors="replace")[-3000:]
    return observer


def assert_trained_at(observer: PriorityObserver, normal: ThreadPriority) -> None:
    assert observer.seen, "no step was recorded"
    for threads in observer.seen:
        assert threads, "no thread seen"
        assert set(threads.values()) == {normal}, threads


@pytest.mark.parametrize("privileged", [True, False], ids=["privileged", "unprivileged"])
def test_the_spare_warms_up_at_the_lowest_priority_and_its_job_trains_at_the_workers(
    privileged: bool, make_spec: Callable[..., TrainingSpec], tmp_path: Path
) -> None:
    command = spare_command(privileged)
    normal = ThreadPriority.of(os.getpid())  # this test is the spare's worker
    log = tmp_path / "spare.log"
    with spare_process(command, log) as spare:
        # The warm-up thread at SCHED_IDLE and nice 19; the main thread (the job's) as started.
        wait_until(lambda: warming_up_at_the_lowest_priority(spare.pid), spare, log)
        assert ThreadPriority.of(spare.pid) == normal
        wait_until(lambda: SPARE_READY in log.read_text(errors="replace"), spare, log)
        if not privileged:
            # Nothing left that this process could not raise: the libraries that start threads
            # when imported were imported by the main thread, and the warm-up thread ended.
            assert lowered_threads(spare.pid) == []
        observer = train_in(spare, rank_job(make_spec(train_steps=2)), tmp_path, log)
    assert_trained_at(observer, normal)
    assert len(observer.records) == 2
    assert FRESH_PROCESS not in log.read_text(errors="replace")


def test_a_job_that_comes_during_the_warm_up_trains_at_the_workers_priority(
    make_spec: Callable[..., TrainingSpec], tmp_path: Path
) -> None:
    command = spare_command(privileged=True)
    normal = ThreadPriority.of(os.getpid())
    log = tmp_path / "spare.log"
    with spare_process(command, log) as spare:
        wait_until(lambda: warming_up_at_the_lowest_priority(spare.pid), spare, log)
        # The worker takes the spare (launch.WarmProcesses.take_spare): it may raise the spare's
        # threads (root here), and does before it sends the job, which waits on the warm-up.
        assert raise_lowered_threads(spare.pid) == []
        assert lowered_threads(spare.pid) == []
        observer = train_in(spare, rank_job(make_spec(train_steps=1)), tmp_path, log)
    assert_trained_at(observer, normal)
    text = log.read_text(errors="replace")
    assert SPARE_READY not in text and FRESH_PROCESS not in text


def test_a_starved_warm_up_that_cannot_be_raised_gives_way_to_a_fresh_process(
    make_spec: Callable[..., TrainingSpec], tmp_path: Path
) -> None:
    command = spare_command(privileged=False)
    if shutil.which("taskset") is None:
        skip_missing_layer("needs taskset")
    normal = ThreadPriority.of(os.getpid())
    log = tmp_path / "spare.log"
    # A busy process at the worker's priority on the one CPU the spare may use: the warm-up
    # thread (SCHED_IDLE, weight 3 against the hog's 1024) gets next to nothing however
    # loaded the host is, and the process may not raise it. A CPU this process may use (CPU 0
    # may lie outside a container's set).
    cpu = str(max(os.sched_getaffinity(0)))
    hog = subprocess.Popen(["taskset", "-c", cpu, sys.executable, "-c", "while True: pass"])
    try:
        with spare_process(["taskset", "-c", cpu, *command], log) as spare:
            wait_until(lambda: warming_up_at_the_lowest_priority(spare.pid), spare, log)

            def free_the_cpu_once_given_up() -> None:
                if FRESH_PROCESS in log.read_text(errors="replace"):
                    hog.kill()  # the fresh process's cold imports need not wait on it

            # The process image is replaced (same pid: the worker sees nothing of it), and the
            # job trains at the worker's priority after cold imports.
            job = rank_job(make_spec(train_steps=1))
            observer = train_in(spare, job, tmp_path, log, free_the_cpu_once_given_up)
    finally:
        hog.kill()
        hog.wait()
    assert_trained_at(observer, normal)
    assert FRESH_PROCESS in log.read_text(errors="replace")


def test_starved_means_waiting_for_a_cpu_without_getting_one() -> None:
    window_ns = int(0.5e9)
    assert starved(ran_ns=window_ns // 100, waited_ns=window_ns * 9 // 10)
    assert not starved(ran_ns=window_ns // 2, waited_ns=window_ns // 2)  # half a CPU
    assert not starved(ran_ns=0, waited_ns=0)  # blocked (reading from disk), not starved
