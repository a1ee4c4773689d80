"""How fast the worker stores steps, and what recording costs a training step.

1. Throughput: record_step/store_step (one transaction per step: the step row, a COPY of its
   completions, errors and logs, the job row) on realistic steps of 64-512 completions
   (~100-character texts, 2-3 function scores), against the pre-#8 record_step (ORM adds,
   psycopg write_row) kept below as the baseline, and against a bare COPY of pre-encoded rows
   (the server's ingest ceiling for this table). Interleaved, one run.
2. Share of a training step: the demo job on the tiny model, in-process (run_grpo), with an
   observer that (none) stores nothing, (sync) stores each step before training goes on (the
   pre-#8 DatabaseObserver), (writer) hands it to the BackgroundWriter (now). Interleaved.

Run: python bench/bench_recording.py [--steps 30] [--train-steps 40] [--rounds 3]
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from synthetic import (  # type: ignore[import-not-found]
    create_running_job,
    create_tenant_key,
    embedded_postgres,
    make_step_record,
)

from sandbox.reward_host import create_sandbox
from sandbox.settings import SandboxSettings
from service.bulk import (
    copy_into,
    copy_json,
    copy_line,
    copy_lines,
    copy_number,
    copy_text,
    without_nul,
)
from service.db import session_scope
from service.jobs.step_repository import COMPLETION_COLUMNS
from service.models import Completion, Job, RewardErrorRecord, RewardLog, Step
from workers.database import with_database_retries
from workers.step_store import BackgroundWriter, completion_copy_lines, store_step
from workers.training.step_records import RewardConfig, StepRecord

SIZES = (64, 256, 512)


def legacy_record_step(session: object, job_id: str, record: StepRecord) -> None:
    """record_step as it was before #8 (minus config bookkeeping): the baseline to beat."""
    from sqlalchemy import delete, update
    from sqlalchemy.orm import Session

    assert isinstance(session, Session)
    for model in (Step, Completion, RewardErrorRecord, RewardLog):
        session.execute(delete(model).where(model.job_id == job_id, model.step == record.step))
    session.add(
        Step(
            job_id=job_id,
            step=record.step,
            config_version=record.config_version,
            reward_mean=record.reward_mean,
            reward_std=record.reward_std,
            loss=record.loss,
            kl=record.kl,
            learning_rate=record.learning_rate,
            duration_s=record.duration_s,
            reward_functions={name: {"mean": m.mean} for name, m in record.functions.items()},
        )
    )
    session.flush()
    copy_into(
        session,
        "completions",
        COMPLETION_COLUMNS,
        (
            copy_line(
                job_id,
                record.step,
                record.config_version,
                c.prompt_index,
                c.group_position,
                c.dataset_index,
                copy_json(c.prompt),
                copy_text(c.completion),
                copy_json(c.scores),
                copy_number(c.total),
                copy_number(c.advantage),
                c.token_count,
            )
            for c in record.completions
        ),
    )
    for name, result in record.function_results.items():
        if result.logs:
            session.add(
                RewardLog(
                    job_id=job_id,
                    step=record.step,
                    function_name=name,
                    function_version=result.version,
                    output=without_nul(result.logs),
                    truncated=result.logs_truncated,
                )
            )
    session.execute(
        update(Job)
        .where(Job.id == job_id)
        .values(steps_completed=record.step, heartbeat_at=datetime.now(UTC))
    )


def legacy_store_step(job_id: str, record: StepRecord) -> None:
    def write() -> None:
        with session_scope() as session:
            legacy_record_step(session, job_id, record)

    with_database_retries(write, what="legacy")


def bare_copy(job_id: str, record: StepRecord) -> None:
    """Only the COPY of the step's completions, rows encoded beforehand: Postgres's share."""
    lines = completion_copy_lines(job_id, record)
    with session_scope() as session:
        raw = session.connection().connection.driver_connection
        with raw.cursor() as cursor:  # type: ignore[union-attr]
            copy_lines(cursor, "completions", COMPLETION_COLUMNS, lines)


def throughput(steps: int) -> None:
    tenant_id, _ = create_tenant_key()
    job_id = create_running_job(tenant_id)
    writers: dict[str, Callable[[str, StepRecord], None]] = {
        "before (pre-#8 record_step)": legacy_store_step,
        "after (record_step now)": store_step,
        "bare COPY, pre-encoded": bare_copy,
    }
    print("\n== recording throughput: one transaction per step, rows = completions ==")
    print(f"{'completions/step':>16}  {'writer':<28} {'ms/step':>8} {'rows/s':>9}")
    next_step = 1
    for size in SIZES:
        # Records built up front: their construction is the trainer's cost, not ours.
        timings: dict[str, list[float]] = {name: [] for name in writers}
        for _ in range(steps):
            for name, write in writers.items():  # interleaved: load changes hit all alike
                record = make_step_record(next_step, completions=size)
                next_step += 1
                started = time.perf_counter()
                write(job_id, record)
                timings[name].append(time.perf_counter() - started)
        for name, samples in timings.items():
            per_step = statistics.median(samples)
            print(f"{size:>16}  {name:<28} {per_step * 1000:>8.2f} {size / per_step:>9.0f}")


class BenchObserver:
    """The worker's observer, minus the job row reads (should_stop: never), in three modes."""

    def __init__(self, mode: str, job_id: str) -> None:
        self.mode = mode
        self.job_id = job_id
        self.writer = BackgroundWriter(job_id) if mode == "writer" else None
        self.in_on_step = 0.0
        self.write_cpu = 0.0  # CPU seconds spent storing, in whichever thread stores
        self.step_ends: list[float] = []

    def _store(self, record: StepRecord) -> None:
        started = time.thread_time()
        store_step(self.job_id, record)
        self.write_cpu += time.thread_time() - started

    def on_step(self, record: StepRecord) -> None:
        started = time.perf_counter()
        if self.mode == "sync":
            self._store(record)
        elif self.writer is not None:
            self.writer.submit(lambda: self._store(record))
        ended = time.perf_counter()
        self.in_on_step += ended - started
        self.step_ends.append(ended)

    def on_checkpoint(self, step: int, path: Path) -> None:
        pass

    def should_stop(self) -> str | None:
        return None

    def on_config_rejected(self, version: int, message: str) -> None:
        pass

    def poll_reward_config(self, current_version: int, starting_step: int) -> RewardConfig | None:
        return None


def training_share(train_steps: int, rounds: int) -> None:
    import torch
    from demo_job import demo_hyperparameters, demo_spec  # type: ignore[import-not-found]

    from workers.training.grpo import run_grpo

    # One intra-op thread: on a shared 2-core machine two OpenMP threads that spin-wait for
    # each other made step times vary tenfold (0.07 s to 1.6 s) from run to run.
    torch.set_num_threads(1)

    tenant_id, _ = create_tenant_key()
    cache = Path(tempfile.mkdtemp(prefix="rft-bench-models-"))
    modes = ("none", "sync", "writer")
    # Per mode: seconds per step (wall, steady state: step 2 onwards) and seconds in on_step.
    step_s: dict[str, list[float]] = {m: [] for m in modes}
    on_step_s: dict[str, list[float]] = {m: [] for m in modes}
    write_cpu_s: dict[str, list[float]] = {m: [] for m in modes}
    sandbox = create_sandbox(SandboxSettings(isolation="none"))
    try:
        for round_index in range(rounds):
            # Rotated order: later runs in one process are slower (allocator, caches), and
            # the load from other tenants of the machine drifts.
            for mode in modes[round_index % 3 :] + modes[: round_index % 3]:
                gc.collect()
                job_id = create_running_job(tenant_id)
                observer = BenchObserver(mode, job_id)
                spec = demo_spec(
                    "rft-tiny",
                    demo_hyperparameters(train_steps, checkpoint_every=100_000),
                    cache / f"out-{round_index}-{mode}",
                    cache,
                )
                run_grpo(spec, sandbox, observer)
                if observer.writer is not None:
                    observer.writer.close()
                ends = observer.step_ends
                step_s[mode].append((ends[-1] - ends[0]) / (len(ends) - 1))
                on_step_s[mode].append(observer.in_on_step / len(ends))
                write_cpu_s[mode].append(observer.write_cpu / len(ends))
    finally:
        sandbox.close()
    for mode in modes:
        print(f"  {mode}: s/step per round {[round(v, 4) for v in step_s[mode]]}")
    base = statistics.median(step_s["none"])
    print(f"\n== recording's share of a training step: demo job, tiny model, {train_steps} steps,")
    print(f"   16 completions/step, {rounds} interleaved rounds, medians ==")
    print(
        f"{'observer':<8} {'s/step':>8} {'vs none':>8} {'blocked ms':>11} {'blocked share':>14}"
        f" {'store CPU ms':>13}"
    )
    for mode in modes:
        per_step = statistics.median(step_s[mode])
        in_step = statistics.median(on_step_s[mode])
        cpu = statistics.median(write_cpu_s[mode])
        print(
            f"{mode:<8} {per_step:>8.4f} {per_step / base - 1:>+8.1%} {in_step * 1000:>11.3f} "
            f"{in_step / per_step:>14.2%} {cpu * 1000:>13.2f}"
        )
    print(
        "blocked = time the training thread spends in on_step; store CPU = CPU time of\n"
        "store_step (in the training thread for sync, in the writer thread for writer)."
    )
    # Recording's cost is the step time it adds: a step with it against one without, round by
    # round (each round ran every mode once, back to back).
    print("\n== recording's cost: time per step with recording against without ==")
    for mode in ("sync", "writer"):
        ratios = [w / wo for w, wo in zip(step_s[mode], step_s["none"], strict=True)]
        print(
            f"{mode:<8} {statistics.median(step_s[mode]):.4f} s/step with, {base:.4f} without: "
            f"step time {statistics.median(ratios) - 1:+.1%} (per round "
            f"{', '.join(f'{r - 1:+.1%}' for r in ratios)})"
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=30, help="steps per size and writer")
    parser.add_argument("--train-steps", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    print(f"load average at start: {os.getloadavg()}")
    with embedded_postgres():
        if args.steps:
            throughput(args.steps)
        training_share(args.train_steps, args.rounds)
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
