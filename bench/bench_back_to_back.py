"""Jobs that follow each other closely: each submitted as soon as the previous one ended, with a
spare forked from the worker's template (``RFT_SPARE_FORK=always``) and with a new Python per
spare (``never``), in one run. A worker's first job is left out (both wait for the imports).

For each job, from the worker's log and the service's timestamps (bench_first_step.py): task
received -> the training process has the job ("rank 0 of 1"), and submit -> first step visible;
and the wall time of the whole series.

Run: python bench/bench_back_to_back.py [--jobs 4] [--rounds 2]
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_first_step import demo_tenant, submit_and_wait  # type: ignore[import-not-found]

from service.stack import LocalStack

LEASED = "job start (received -> running, lease taken)"
HANDED = "worker: dataset/config, job folder, to the spare"
TOTAL = "TOTAL submit -> first step visible"


def series(mode: str, jobs: int, work: Path) -> tuple[list[dict[str, float]], float]:
    """``jobs`` back-to-back jobs on a fresh stack whose worker starts spares as ``mode`` says;
    their timings (the first, cold job left out) and the series' wall time."""
    with LocalStack(work / mode, workers=1, extra_env={"RFT_SPARE_FORK": mode}) as stack:
        worker_log = stack.log_dir / "worker1.log"
        with demo_tenant(stack) as (http, dataset_id):
            submit_and_wait(http, dataset_id, worker_log)  # the cold first job
            started = time.perf_counter()
            timings = [submit_and_wait(http, dataset_id, worker_log) for _ in range(jobs)]
            return timings, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    print(f"load average at start: {os.getloadavg()}")
    work = Path(tempfile.mkdtemp(prefix="rft-bench-back-to-back-"))
    results: dict[str, list[tuple[list[dict[str, float]], float]]] = {"never": [], "always": []}
    for round_ in range(args.rounds):  # interleaved: a machine's load drifts between them
        for mode in results:
            results[mode].append(series(mode, args.jobs, work / f"round{round_}"))
    print(f"\n== {args.jobs} back-to-back 3-step demo jobs after a cold one, {args.rounds} rounds")
    print(f"{'spares':<28} {'received -> has job':>20} {'submit -> step 1':>17} {'series':>9}")
    walls = {}
    for mode, runs in results.items():
        timings = [t for run, _ in runs for t in run]
        walls[mode] = statistics.median(wall for _, wall in runs)
        handed = statistics.median(t[LEASED] + t[HANDED] for t in timings)
        total = statistics.median(t[TOTAL] for t in timings)
        label = {"never": "new Python per spare", "always": "forked from the template"}[mode]
        print(f"{label:<28} {handed:>19.3f}s {total:>16.3f}s {walls[mode]:>8.1f}s")
    print(f"series wall time, forked / new: {walls['always'] / walls['never']:.2f}")
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
