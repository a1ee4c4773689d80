"""Latency from submitting a job to its first recorded step, on a warm worker, in parts.

A LocalStack (embedded Postgres and Redis, the API, one Celery worker) runs one demo job first
so that the worker's imports are done; then the demo job is submitted --rounds times. Each
submission is timed from the client, and split with the timestamps the service keeps anyway:
the job row (created_at, started_at), the first step row (created_at, duration_s) and the
worker's log (task received; the training process's "rank 0 of 1" once it has the job; "GRPO
on ..." once the trainer is built). A second section times
the worker's start-up pieces in this process (model load, trainer build, sandbox start).

Run: python bench/bench_first_step.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx
from synthetic import create_tenant_key, use_database  # type: ignore[import-not-found]

from service.demo.follow import DEMO_DIR, demo_job_request
from service.stack import LocalStack
from workers.training.spare import SPARE_READY

LOG_LINE = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}): [^\]]*\] (.*)$")


def log_times(log: Path, pattern: str, after: float) -> list[float]:
    """Times (epoch s) of the worker log lines matching ``pattern`` logged after ``after``."""
    times = []
    for line in log.read_text(errors="replace").splitlines():
        match = LOG_LINE.match(line)
        if match and re.search(pattern, match.group(2)):
            # Celery logs local time without a zone; the stack runs with the machine's zone.
            stamp = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f").astimezone()
            if stamp.timestamp() >= after - 0.01:
                times.append(stamp.timestamp())
    return times


def epoch(value: str) -> float:
    return datetime.fromisoformat(value).astimezone(UTC).timestamp()


def wait_for_spare(worker_log: Path, jobs_so_far: int, timeout_s: float = 120) -> None:
    """Until the worker's spare training process (started when the previous job began) has
    imported torch, transformers and TRL: what makes the worker warm for a one-process job.
    Each job takes one spare; the worker logs a line as each becomes ready."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if len(log_times(worker_log, re.escape(SPARE_READY), 0)) > jobs_so_far:
            return
        time.sleep(0.1)
    raise RuntimeError(f"no spare training process became ready within {timeout_s} s")


def submit_and_wait(http: httpx.Client, dataset_id: str, worker_log: Path) -> dict[str, float]:
    body = demo_job_request(dataset_id, train_steps=3)
    submitted = time.time()
    response = http.post("/v1/jobs", json=body)
    response.raise_for_status()
    accepted = time.time()
    job_id = response.json()["id"]
    while True:
        steps = http.get(f"/v1/jobs/{job_id}/steps", params={"limit": 1}).json()["data"]
        if steps:
            seen = time.time()
            break
        time.sleep(0.01)
    job = http.get(f"/v1/jobs/{job_id}").json()
    while job["status"] not in ("succeeded", "failed", "cancelled"):
        time.sleep(0.1)
        job = http.get(f"/v1/jobs/{job_id}").json()
    received = log_times(worker_log, r"Task \S+\[.*\] received", submitted)[0]
    # The training process's first line once it has the job (rank_process.run_rank).
    handed = log_times(worker_log, r"^rank 0 of 1, engine", submitted)[0]
    built = log_times(worker_log, r"^GRPO on ", submitted)[0]
    step = steps[0]
    recorded = epoch(step["created_at"])
    step_began = recorded - step["duration_s"]
    started = epoch(job["started_at"])
    return {
        "POST /v1/jobs (validate, insert, commit, enqueue)": accepted - submitted,
        "Celery pickup (response -> task received)": received - accepted,
        "job start (received -> running, lease taken)": started - received,
        "worker: dataset/config, job folder, to the spare": handed - started,
        "spare: sandbox, reward functions, model, trainer": built - handed,
        # The step row's created_at is taken as the writer stores it (well under 1 ms after
        # the record is built), so storing step 1 is counted in this line.
        "train() set-up until step 1 begins": step_began - built,
        "step 1 (generate, score, backward, record)": step["duration_s"],
        "client sees it (row written -> poll answers)": seen - recorded,
        "TOTAL submit -> first step visible": seen - submitted,
    }


@contextlib.contextmanager
def demo_tenant(stack: LocalStack) -> Iterator[tuple[httpx.Client, str]]:
    """A new tenant's client of ``stack``'s API, and the demo dataset's id, uploaded by it."""
    assert stack.database_url
    use_database(stack.database_url)
    _, key = create_tenant_key()
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=stack.base_url, headers=headers, timeout=120) as http:
        with open(DEMO_DIR / "dataset.jsonl", "rb") as handle:
            response = http.post("/v1/datasets", files={"file": ("demo.jsonl", handle)})
        response.raise_for_status()
        yield http, response.json()["id"]


def in_process_parts() -> dict[str, float]:
    """The worker's start-up pieces, timed one by one in this (import-warm) process."""
    from demo_job import demo_hyperparameters, demo_spec  # type: ignore[import-not-found]

    from sandbox.reward_host import ProcessSandbox
    from service.base_models.built_in.tiny_model import ensure_tiny_model
    from service.settings import get_settings, sandbox_settings
    from workers.training.grpo import build_trainer
    from workers.training.reward_dispatch import RewardDispatcher

    work = Path(tempfile.mkdtemp(prefix="rft-bench-first-"))
    ensure_tiny_model(work)  # built once per machine in real life: not part of a job
    spec = demo_spec("rft-tiny", demo_hyperparameters(3), work / "out", work)
    parts: dict[str, float] = {}
    started = time.perf_counter()
    sandbox = ProcessSandbox(sandbox_settings(get_settings(), allow_network=False, secrets={}))
    dispatcher = RewardDispatcher(sandbox, spec.reward_config, spec.dataset)
    dispatcher.load_initial()
    parts["sandbox start + load the reward functions"] = time.perf_counter() - started
    started = time.perf_counter()
    build_trainer(spec, dispatcher)
    parts["build_trainer (tokenizer, model, PEFT, GRPOTrainer)"] = time.perf_counter() - started
    sandbox.close()
    return parts


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    print(f"load average at start: {os.getloadavg()}")
    work = Path(tempfile.mkdtemp(prefix="rft-bench-first-step-"))
    rounds: list[dict[str, float]] = []
    with LocalStack(work / "stack", workers=1) as stack:
        worker_log = stack.log_dir / "worker1.log"
        with demo_tenant(stack) as (http, dataset_id):
            cold = submit_and_wait(http, dataset_id, worker_log)  # warms the worker
            for done in range(1, args.rounds + 1):
                # The job trains in a spare process started (and importing) when the previous
                # job began; a worker is warm once it is ready (seconds on a busy machine).
                wait_for_spare(worker_log, jobs_so_far=done)
                rounds.append(submit_and_wait(http, dataset_id, worker_log))
    print(f"\n== submit -> first recorded step, warm worker, median of {args.rounds} ==")
    print(f"{'part':<52} {'cold (1st job)':>14} {'warm':>8}")
    for name in rounds[0]:
        warm = statistics.median(r[name] for r in rounds)
        print(f"{name:<52} {cold[name]:>13.3f}s {warm:>7.3f}s")
    print(
        "warm totals per round: "
        + ", ".join(f"{r['TOTAL submit -> first step visible']:.2f} s" for r in rounds)
    )
    print("\n== each warm round ==")
    for name in rounds[0]:
        print(f"{name:<52} " + " ".join(f"{r[name]:>7.3f}s" for r in rounds))
    print("\n== the worker's start-up pieces, in-process (imports warm) ==")
    for name, seconds in in_process_parts().items():
        print(f"{name:<52} {seconds:>7.3f}s")
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
