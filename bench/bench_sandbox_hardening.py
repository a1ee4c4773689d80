"""What the seccomp filter and the cgroup cost the warm bwrap sandbox (issue #16).

The same workload as bench_sandbox.py (64-completion batches, regex format reward), on a
sandbox launched as usual ("hardened") and on one launched without the filter and the cgroup
("plain"), alternating, so that a machine shared with other work loads both alike. Reported:
completions per wall second, completions per CPU second of the worker and the whole sandbox
tree (steadier than wall time when other work competes for the CPUs), and the time from
starting a sandbox process to its first answer.

Run: python bench/bench_sandbox_hardening.py [--rounds 6] [--steps 1500] [--starts 20]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_sandbox import BATCH_SIZE, FORMAT_REWARD, make_batch
from variants import interleaved  # type: ignore[import-not-found]

import sandbox.worker_process
from sandbox.api import RewardFunctionSpec, ScoringBatch
from sandbox.isolation import LaunchPlan, detect_isolation, plan_launch
from sandbox.reward_host import ProcessSandbox
from sandbox.settings import SandboxSettings
from sandbox.worker_process import SandboxWorker

VARIANTS = ("plain", "hardened")
Measured = TypeVar("Measured")


def plain_plan(*args: Any, **kwargs: Any) -> LaunchPlan:
    """The real plan_launch (whatever it is called with), less the seccomp filter and the
    cgroup."""
    return replace(plan_launch(*args, **kwargs), seccomp_filter=None, cgroup=None)


def launching(variant: str) -> None:
    sandbox.worker_process.plan_launch = plain_plan if variant == "plain" else plan_launch


def tree_cpu_s(root: int) -> float:
    """User + system CPU seconds of `root` and its descendants, from /proc."""
    total, pending = 0.0, [root]
    while pending:
        pid = pending.pop()
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as handle:
                pending += [int(child) for child in handle.read().split()]
    return total


def warm_rates(batches: list[ScoringBatch]) -> tuple[float, float]:
    """Completions per wall second and per CPU second (worker plus sandbox tree)."""
    with ProcessSandbox(SandboxSettings(isolation="bwrap")) as running:
        running.load([RewardFunctionSpec(name="format_reward", source=FORMAT_REWARD)])
        for batch in batches[:5]:
            running.score(batch)
        process = running._workers[0].process
        assert process is not None
        cpu_before, own_before = tree_cpu_s(process.pid), time.process_time()
        started = time.perf_counter()
        for batch in batches:
            running.score(batch)
        wall = time.perf_counter() - started
        cpu = tree_cpu_s(process.pid) - cpu_before + time.process_time() - own_before
    completions = len(batches) * BATCH_SIZE
    return completions / wall, completions / cpu


def start_ms() -> float:
    worker = SandboxWorker(SandboxSettings(isolation="bwrap"), "bench")
    started = time.perf_counter()
    worker.start()
    elapsed = time.perf_counter() - started
    worker.shut_down()
    return elapsed * 1000


def alternate(rounds: int, measure: Callable[[], Measured]) -> dict[str, list[Measured]]:
    results: dict[str, list[Measured]] = {variant: [] for variant in VARIANTS}
    for _, variant in interleaved(VARIANTS, rounds):
        launching(variant)
        results[variant].append(measure())
    launching("hardened")
    return results


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=6, help="warm runs of each variant")
    parser.add_argument("--steps", type=int, default=1500, help="64-completion batches per run")
    parser.add_argument("--starts", type=int, default=20, help="process starts of each variant")
    arguments = parser.parse_args()
    check = detect_isolation()
    if not check:
        sys.exit(f"bubblewrap unusable: {check.reason}")
    rng = random.Random(0)
    batches = [make_batch(rng, step) for step in range(arguments.steps)]
    print(f"{arguments.rounds} alternating runs of {arguments.steps} x {BATCH_SIZE} completions")
    warm = alternate(arguments.rounds, lambda: warm_rates(batches))
    starts = alternate(arguments.starts, start_ms)
    for variant in VARIANTS:
        wall = [rates[0] for rates in warm[variant]]
        cpu = [rates[1] for rates in warm[variant]]
        print(
            f"  {variant:8s}  median {statistics.median(wall):9,.0f} completions/s "
            f"(best {max(wall):,.0f}), {statistics.median(cpu):9,.0f} per CPU second, "
            f"start to ready {statistics.median(starts[variant]):.1f} ms"
        )


if __name__ == "__main__":
    main()
