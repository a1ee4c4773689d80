"""What the overhead benches (bench_overhead.py, bench_sft.py) share: one thread for torch on
both sides, the bare scripts' hand-written CPU settings, how a bare script trains and how its
config is checked against the worker's, a run's figures, the in-process
stand-ins that swap parts of the service out (rewards called in this process, an observer that
keeps each step's end time), the worker's recording observer over a job row, and the service on
this machine with a client of it."""

from __future__ import annotations

import itertools
import math
import os
import time
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
from synthetic import (  # type: ignore[import-not-found]
    create_running_job,
    create_tenant_key,
    use_database,
)
from transformers import PrinterCallback, TrainerCallback

from sandbox.api import FunctionResult, RewardFunctionSpec, ScoringBatch
from service.artifacts.storage import artifact_store
from service.jobs.hyperparameters import Hyperparameters
from service.settings import get_settings
from service.stack import LocalStack
from workers.circuit_breaker import RewardCircuitBreaker
from workers.database_observer import DatabaseObserver
from workers.identity import WORKER_ID
from workers.job_watch import JobWatcher
from workers.training.step_records import RewardConfig, StepRecord

# Both sides run torch on one thread: on a shared 2-core machine, two OpenMP threads that
# spin-wait for each other made step times swing tenfold between runs.
THREADS_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def use_one_thread() -> None:
    """Torch on one thread in this process (the bare side), THREADS_ENV for those it starts."""
    import torch

    os.environ.update(THREADS_ENV)
    torch.set_num_threads(1)


def bare_cpu_arguments(hp: Hyperparameters, *, steps: int, seed: int) -> dict[str, Any]:
    """The TrainingArguments a user writes by hand to train on CPU as the worker does (each
    bench's config_differences checks the whole config against the worker's own)."""
    return {
        "learning_rate": hp.learning_rate,
        "lr_scheduler_type": "constant",
        "warmup_steps": 0,
        "max_steps": steps,
        "seed": seed,
        "data_seed": seed,
        "bf16": False,
        "fp16": False,
        "activation_checkpointing": False,
        "dataloader_pin_memory": False,
        "use_cpu": True,
        "logging_steps": 1,
        "save_strategy": "steps",
        "save_steps": hp.checkpoint_every,
        "save_only_model": False,
        "report_to": "none",
        "disable_tqdm": True,
        "dataloader_num_workers": 0,
        # As the worker sets it (transformers' own default optimizer is adamw_torch_fused).
        "optim": "adamw_torch",
    }


def differing_fields(
    service: dict[str, Any], bare: dict[str, Any], *, ignored: Collection[str] = ()
) -> list[str]:
    """The fields (``ignored`` aside) where a bare script's config differs from the worker's,
    each as ``name: service value, bare value``; the configs as their ``to_dict()``."""
    return [
        f"{key}: service {service.get(key)!r}, bare {bare.get(key)!r}"
        for key in sorted(set(service) | set(bare))
        if key not in ignored and service.get(key) != bare.get(key)
    ]


def train_bare(trainer: Any, clock: TrainerCallback, adapter_dir: Path) -> None:
    """Trains a bare script's trainer as the worker trains its own (no per-step print),
    ``clock`` called back at each step, then saves its adapter into ``adapter_dir``."""
    trainer.remove_callback(PrinterCallback)
    trainer.add_callback(clock)
    trainer.train()
    trainer.save_model(str(adapter_dir))


@dataclass
class Run:
    kind: str
    step_s: list[float] = field(default_factory=list)  # wall time of each step (step 2 on)
    rewards: list[float] = field(default_factory=list)  # per-step reward mean
    function_means: list[dict[str, float]] = field(default_factory=list)
    recorded_duration_s: list[float] = field(default_factory=list)  # service: duration_s
    phases: list[dict[str, float]] = field(default_factory=list)  # per step (step 2 on)
    dtypes: dict[str, str] = field(default_factory=dict)
    events: dict[str, list[float]] = field(default_factory=dict)  # recording: [seconds, calls]
    end_to_end_s: float = 0.0
    train_s: float = 0.0  # first step begins -> last step ends
    reads_s: float = 0.0  # per step, in should_stop + poll_reward_config (in-process runs)
    on_step_s: float = 0.0  # per step, in on_step (in-process runs)


class InProcessSandbox:
    """RewardSandbox that calls the demo functions in this process: no pipes, no isolation."""

    def __init__(self) -> None:
        self._names: list[str] = []
        self._namespace: dict[str, Any] = {}

    def load(self, functions: Sequence[RewardFunctionSpec]) -> None:
        for spec in functions:
            exec(spec.source, self._namespace)  # our own bundled demo code
        self._names = [spec.name for spec in functions]

    def score(self, batch: ScoringBatch) -> dict[str, FunctionResult]:
        return {
            name: FunctionResult(
                name=name,
                version=1,
                scores=[
                    float(self._namespace[name](p, c, e))
                    for p, c, e in zip(
                        batch.prompts, batch.completions, batch.examples, strict=True
                    )
                ],
            )
            for name in self._names
        }

    def close(self) -> None:
        pass


class TimedObserver:
    """Wraps an observer (or none) and keeps each step's end time."""

    def __init__(self, inner: DatabaseObserver | None) -> None:
        self.inner = inner
        self.ends: list[float] = []
        self.rewards: list[float] = []
        self.reads_s = 0.0  # in should_stop and poll_reward_config: the job row, read per step
        self.on_step_s = 0.0

    def on_step(self, record: StepRecord) -> None:
        started = time.perf_counter()
        if self.inner is not None:
            self.inner.on_step(record)
        self.ends.append(time.perf_counter())
        self.on_step_s += self.ends[-1] - started
        self.rewards.append(record.reward_mean if record.reward_mean is not None else math.nan)

    def on_checkpoint(self, step: int, path: Path) -> None:
        if self.inner is not None:
            self.inner.on_checkpoint(step, path)

    def should_stop(self) -> str | None:
        if self.inner is None:
            return None
        started = time.perf_counter()
        try:
            return self.inner.should_stop()
        finally:
            self.reads_s += time.perf_counter() - started

    def on_config_rejected(self, version: int, message: str) -> None:
        pass

    def poll_reward_config(self, current_version: int, starting_step: int) -> RewardConfig | None:
        if self.inner is None:
            return None
        started = time.perf_counter()
        try:
            return self.inner.poll_reward_config(current_version, starting_step)
        finally:
            self.reads_s += time.perf_counter() - started


@contextmanager
def recording_observer(database: bool) -> Iterator[DatabaseObserver | None]:
    """The worker's DatabaseObserver over a new running job, its job state from the
    LISTEN/NOTIFY watcher as the worker runs it (not read per step); closed, and its watcher
    stopped, when the block ends. None without a database."""
    if not database:
        yield None
        return
    tenant_id, _ = create_tenant_key()
    job_id = create_running_job(tenant_id, worker_id=WORKER_ID)
    with JobWatcher(job_id, get_settings().require_database_url()) as watcher:
        observer = DatabaseObserver(
            job_id,
            RewardCircuitBreaker(max_error_rate=0.5, patience=3),
            artifact_store(get_settings()),
            watcher,
        )
        try:
            yield observer
        finally:
            observer.close()


@contextmanager
def local_service(root: Path, extra_env: dict[str, str]) -> Iterator[httpx.Client]:
    """The service on this machine (LocalStack: embedded Postgres and Redis, the API, one
    Celery worker, ``extra_env`` in their environment) and a client of it as a new tenant;
    this process's sessions use its database (the in-process variants record there)."""
    with LocalStack(root, workers=1, extra_env=extra_env) as stack:
        assert stack.database_url
        use_database(stack.database_url)
        _, key = create_tenant_key()
        headers = {"Authorization": f"Bearer {key}"}
        with httpx.Client(base_url=stack.base_url, headers=headers, timeout=60) as http:
            yield http


def wait_for_steps(
    http: httpx.Client, job_id: str, run: Run, started: float
) -> list[dict[str, Any]]:
    """Waits for the service's job to end, then fills ``run``'s end-to-end time (since
    ``started``), step times (between consecutive steps rows' created_at) and recorded
    durations, and returns the steps rows. Raises unless the job succeeded."""
    while True:
        job = http.get(f"/v1/jobs/{job_id}").json()
        if job["status"] in ("succeeded", "failed", "cancelled"):
            break
        # Rarely: each poll costs the API and Postgres CPU that the 2-core machine's worker
        # would otherwise have (polling every 50 ms slowed the service's steps measurably).
        time.sleep(0.5)
    run.end_to_end_s = time.perf_counter() - started
    if job["status"] != "succeeded":
        raise RuntimeError(f"the service's job ended {job['status']}: {job['failure_reason']}")
    rows: list[dict[str, Any]] = http.get(f"/v1/jobs/{job_id}/steps").json()["data"]
    created = [datetime.fromisoformat(row["created_at"]).timestamp() for row in rows]
    run.step_s = [b - a for a, b in itertools.pairwise(created)]
    run.recorded_duration_s = [row["duration_s"] for row in rows]
    return rows
