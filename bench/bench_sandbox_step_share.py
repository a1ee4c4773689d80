"""The sandbox's share of a training step on the tiny model: real GRPO steps (run_grpo),
with the reward sandbox's score() calls timed from the training loop's side (IPC included).

Run: python bench/bench_sandbox_step_share.py [--steps 30] [--isolation bwrap]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from demo_job import demo_hyperparameters, demo_spec  # type: ignore[import-not-found]
from kept_steps import KeptSteps  # type: ignore[import-not-found]

from sandbox.api import FunctionResult, RewardFunctionSpec, ScoringBatch
from sandbox.reward_host import ProcessSandbox
from sandbox.settings import SandboxSettings
from workers.training.grpo import run_grpo


class TimedSandbox:
    """The real sandbox, with the wall time of each score() call kept."""

    def __init__(self, inner: ProcessSandbox) -> None:
        self.inner = inner
        self.score_seconds: list[float] = []

    def load(self, functions: Sequence[RewardFunctionSpec]) -> None:
        self.inner.load(functions)

    def score(self, batch: ScoringBatch) -> dict[str, FunctionResult]:
        started = time.perf_counter()
        try:
            return self.inner.score(batch)
        finally:
            self.score_seconds.append(time.perf_counter() - started)

    def close(self) -> None:
        self.inner.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--isolation", choices=["bwrap", "none"], default="bwrap")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory() as workdir:
        sandbox = TimedSandbox(ProcessSandbox(SandboxSettings(isolation=args.isolation)))
        observer = KeptSteps()
        spec = demo_spec(
            "rft-tiny",
            demo_hyperparameters(args.steps, checkpoint_every=10_000),
            Path(workdir) / "run",
            Path(workdir) / "models",
        )
        try:
            run_grpo(spec, sandbox, observer)
        finally:
            sandbox.close()
    # The first step pays one-time costs (compilation, allocator warm-up): leave it out.
    steps, scores = observer.durations[1:], sandbox.score_seconds[1:]
    step_ms = statistics.median(steps) * 1000
    score_ms = statistics.median(scores) * 1000
    print(f"isolation: {args.isolation}, {len(steps)} steps of 16 completions, 2 functions")
    print(f"median step time:            {step_ms:8.2f} ms")
    print(f"median sandbox score() time: {score_ms:8.2f} ms")
    print(f"sandbox share of a step:     {score_ms / step_ms:8.2%}")
    print(f"total: {sum(scores):.3f} s scoring of {sum(steps):.3f} s training")


if __name__ == "__main__":
    main()
