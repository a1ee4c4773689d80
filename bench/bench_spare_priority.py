"""The warm spare never slows a running job (issue 22, item 2c).

A one-device job trains in the worker's warm spare; once it has recorded its first step the
worker starts the next spare, which imports torch, transformers and TRL and runs a first AdamW
step (seconds of CPU) while the job trains. This bench runs 10-step demo jobs (64 completions
a step) through the whole stack and prints each job's per-step times (each step row's
duration_s) side by side for:

- ``before``: RFT_SPARE_WARM_UP_PRIORITY=normal, the spare warms up at the worker's priority
  in a session of its own (the behaviour before issue 22);
- ``after``: the default, the warm-up at the lowest CPU priority (SCHED_IDLE, nice 19) in a
  thread of its own, the spare in the worker's session; this bench runs as root, so the
  worker may raise the spare's threads (CAP_SYS_NICE);
- ``after, no CAP_SYS_NICE``: the same in a stack started once this bench dropped CAP_SYS_NICE
  from its capability bounding set, as a Docker container runs by default (the spare's
  unprivileged path: numpy and pyarrow imported on its main thread first). Left out unless
  this bench runs as root.

Each variant is a LocalStack of its own (embedded Postgres and Redis, the API, one worker), all
started at once and used in turn: one job at a time on the machine, the variants interleaved
(the order rotates every round). After each job the bench waits until that worker's next spare
is ready, so no warm-up runs during another variant's job, and the next job starts on a warm
worker: its submit -> first step visible is timed as bench_first_step.py times it.

Nothing shields the jobs from other work on the machine (a nice value would not: with
autogroup scheduling it only counts within a session, and the variants' jobs run in different
sessions); run it on a quiet machine, and read the load averages it prints.

Run: python bench/bench_spare_priority.py [--rounds 5] [--steps 10]
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import logging
import os
import re
import signal
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx
from bench_first_step import epoch, log_times  # type: ignore[import-not-found]
from synthetic import create_tenant_key, use_database  # type: ignore[import-not-found]

from service.demo.follow import DEMO_DIR, demo_job_request
from service.stack import LocalStack
from workers.training.spare import SPARE_PRIORITY_ENV, SPARE_READY

PROMPTS_PER_STEP = 8  # x 8 generations (tiny-cpu): 64 completions a step
_PR_CAPBSET_DROP = 24
_CAP_SYS_NICE = 23


@dataclass
class Variant:
    name: str
    env: dict[str, str]
    drop_sys_nice: bool = False
    stack: LocalStack | None = None
    http: httpx.Client | None = None
    dataset_id: str = ""
    jobs: int = 0
    steps: list[list[float]] = field(default_factory=list)
    first_step: list[float] = field(default_factory=list)
    spare_ready_after: list[float] = field(default_factory=list)  # s after the job's step 1

    @property
    def log(self) -> Path:
        assert self.stack is not None
        return self.stack.log_dir / "worker1.log"


def drop_sys_nice() -> None:
    """Processes this one starts from now on run without CAP_SYS_NICE (root included)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_CAPBSET_DROP, _CAP_SYS_NICE, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP, CAP_SYS_NICE)")


def has_sys_nice() -> bool:
    status = Path("/proc/self/status").read_text()
    effective = int(re.search(r"^CapEff:\s*([0-9a-f]+)", status, re.M).group(1), 16)  # type: ignore[union-attr]
    return bool(effective >> _CAP_SYS_NICE & 1)


def wait_for_spares(variant: Variant, count: int, timeout_s: float = 900) -> float:
    """Until the worker has logged ``count`` ready spares; the time (epoch s) of the last."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        ready = log_times(variant.log, re.escape(SPARE_READY), 0)
        if len(ready) >= count:
            return ready[count - 1]
        time.sleep(0.2)
    raise RuntimeError(f"{variant.name}: spare {count} was not ready within {timeout_s} s")


def run_job(variant: Variant, steps: int) -> tuple[list[float], float, float]:
    """One job on the variant's warm worker: its steps' durations, submit -> first step
    visible, and the time its step 1 was recorded (epoch s)."""
    assert variant.http is not None
    http = variant.http
    body = demo_job_request(variant.dataset_id, train_steps=steps)
    body["hyperparameters"]["prompts_per_step"] = PROMPTS_PER_STEP
    submitted = time.time()
    response = http.post("/v1/jobs", json=body)
    response.raise_for_status()
    job_id = response.json()["id"]
    while not http.get(f"/v1/jobs/{job_id}/steps", params={"limit": 1}).json()["data"]:
        time.sleep(0.01)
    first_visible = time.time() - submitted
    job = http.get(f"/v1/jobs/{job_id}").json()
    while job["status"] not in ("succeeded", "failed", "cancelled"):
        time.sleep(0.1)
        job = http.get(f"/v1/jobs/{job_id}").json()
    if job["status"] != "succeeded":
        raise RuntimeError(f"{variant.name}: job {job_id} {job['status']}: {job}")
    rows = http.get(f"/v1/jobs/{job_id}/steps", params={"limit": steps}).json()["data"]
    rows.sort(key=lambda row: row["step"])
    variant.jobs += 1
    return [row["duration_s"] for row in rows], first_visible, epoch(rows[0]["created_at"])


def start(variant: Variant, work: Path, cleanup: contextlib.ExitStack) -> None:
    if variant.drop_sys_nice:
        drop_sys_nice()
    folder = work / variant.name.replace(" ", "_").replace(",", "")
    stack = LocalStack(folder, workers=1, extra_env=variant.env)
    variant.stack = stack.start()
    cleanup.callback(stack.stop)
    assert stack.database_url
    use_database(stack.database_url)
    _, key = create_tenant_key()
    variant.http = httpx.Client(
        base_url=stack.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=60
    )
    cleanup.callback(variant.http.close)
    with open(DEMO_DIR / "dataset.jsonl", "rb") as handle:
        response = variant.http.post("/v1/datasets", files={"file": ("demo.jsonl", handle)})
    response.raise_for_status()
    variant.dataset_id = response.json()["id"]


def ratio(steps: list[float]) -> float:
    """Steps 2-4 against steps 5-10 (means)."""
    return statistics.mean(steps[1:4]) / statistics.mean(steps[4:])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    assert args.steps >= 6, "steps 2-4 are compared with steps 5 and later"
    logging.basicConfig(level=logging.WARNING)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the stacks on a kill too
    print(f"load average at start: {os.getloadavg()}")
    variants = [
        Variant("before", {SPARE_PRIORITY_ENV: "normal"}),
        Variant("after", {}),
    ]
    if has_sys_nice():
        # Started last: the capability is gone for whatever this process starts afterwards.
        variants.append(Variant("after, no CAP_SYS_NICE", {}, drop_sys_nice=True))
    work = Path(tempfile.mkdtemp(prefix="rft-bench-spare-priority-"))
    with contextlib.ExitStack() as cleanup:
        for variant in variants:
            start(variant, work, cleanup)
        for variant in variants:  # a first job each: the worker's own imports
            wait_for_spares(variant, 1)
            run_job(variant, args.steps)
            wait_for_spares(variant, variant.jobs + 1)
        for round_ in range(args.rounds):
            for variant in variants[round_ % len(variants) :] + variants[: round_ % len(variants)]:
                steps, first_visible, step_one = run_job(variant, args.steps)
                ready = wait_for_spares(variant, variant.jobs + 1)
                variant.steps.append(steps)
                variant.first_step.append(first_visible)
                variant.spare_ready_after.append(ready - step_one)
                print(
                    f"round {round_ + 1} {variant.name:<24} steps "
                    + " ".join(f"{s:.2f}" for s in steps)
                    + f"  | 2-4 / 5-{args.steps}: {ratio(steps):.2f}"
                    + f"  | first step visible {first_visible:.2f} s"
                    + f"  | next spare ready {ready - step_one:.1f} s after step 1",
                    flush=True,
                )
    print(f"\n== per-step time (s), median of {args.rounds} rounds ==")
    print(f"{'step':<6}" + "".join(f"{v.name:>26}" for v in variants))
    for step in range(args.steps):
        print(
            f"{step + 1:<6}"
            + "".join(f"{statistics.median(r[step] for r in v.steps):>26.3f}" for v in variants)
        )
    print(f"\n== steps 2-4 against steps 5-{args.steps} (ratio of means; 1.00 = no slowdown) ==")
    for variant in variants:
        ratios = [ratio(r) for r in variant.steps]
        print(
            f"{variant.name:<24} median {statistics.median(ratios):.2f}  rounds "
            + ", ".join(f"{r:.2f}" for r in ratios)
        )
    print("\n== the next job on a warm worker: submit -> first step visible ==")
    for variant in variants:
        print(
            f"{variant.name:<24} median {statistics.median(variant.first_step):.3f} s  rounds "
            + ", ".join(f"{t:.3f}" for t in variant.first_step)
        )
    print("\n== the next spare ready, after the job's step 1 (s) ==")
    for variant in variants:
        print(
            f"{variant.name:<24} median {statistics.median(variant.spare_ready_after):.1f} s  "
            + "rounds "
            + ", ".join(f"{t:.1f}" for t in variant.spare_ready_after)
        )
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
