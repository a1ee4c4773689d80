"""Scoring time per step of an I/O-bound judge through the real sandbox (issue #13).

Workload: generation batches of 64 completions scored by a judge that waits 0.2 s per sample,
as a call to an LLM-judge API would. Goal: under 0.6 s per step (one call takes 0.2 s).
Measured three ways through the same warm sandbox (bubblewrap when usable):

- ``async def`` judge, default max_concurrency (awaited together on one event loop);
- plain ``def`` judge, default max_concurrency (a bounded thread pool once samples prove slow);
- plain ``def`` judge with max_concurrency=1: samples one after another, as before #13.

Run: python bench/bench_judge.py [--steps 10]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sandbox.api import DEFAULT_MAX_CONCURRENCY, RewardFunctionSpec, ScoringBatch
from sandbox.isolation import detect_isolation
from sandbox.reward_host import ProcessSandbox
from sandbox.settings import Isolation, SandboxSettings

BATCH_SIZE = 64
JUDGE_LATENCY_S = 0.2
GOAL_S = 0.6
ASYNC_JUDGE = f"""
import asyncio

async def judge(prompt, completion, example):
    await asyncio.sleep({JUDGE_LATENCY_S})  # the judge API's round trip
    return float(example["answer"] in completion)
"""
THREADED_JUDGE = f"""
import time

def judge(prompt, completion, example):
    time.sleep({JUDGE_LATENCY_S})  # a blocking HTTP client waiting for the judge API
    return float(example["answer"] in completion)
"""


def make_batch(step: int) -> ScoringBatch:
    prompts = [f"What is {i} + {step}?" for i in range(BATCH_SIZE)]
    completions = [f"The answer is {i + step + (i % 3 == 0)}" for i in range(BATCH_SIZE)]
    examples = [{"prompt": p, "answer": str(i + step)} for i, p in enumerate(prompts)]
    return ScoringBatch(prompts=prompts, completions=completions, examples=examples, step=step)


def bench(isolation: Isolation, spec: RewardFunctionSpec, steps: int) -> list[float]:
    """Seconds per step (one function scoring 64 completions), after one warm-up step."""
    settings = SandboxSettings(isolation=isolation, call_timeout_s=60.0)
    with ProcessSandbox(settings) as sandbox:
        sandbox.load([spec])
        sandbox.score(make_batch(0))  # warm-up: imports, and the function proves slow
        times = []
        for step in range(1, steps + 1):
            started = time.perf_counter()
            result = sandbox.score(make_batch(step))[spec.name]
            times.append(time.perf_counter() - started)
            assert not result.errors, result.errors
            assert all(score is not None for score in result.scores)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=10, help="warm steps per variant")
    arguments = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)  # the 'none' mode warning is expected here
    check = detect_isolation()
    isolation: Isolation = "bwrap" if check else "none"
    print(f"isolation: {isolation} ({check.reason})")
    print(f"{BATCH_SIZE} completions per step, judge latency {JUDGE_LATENCY_S} s per sample")
    variants = [
        (f"async def, max_concurrency {DEFAULT_MAX_CONCURRENCY}", ASYNC_JUDGE, {}, arguments.steps),
        (
            f"plain def, max_concurrency {DEFAULT_MAX_CONCURRENCY}",
            THREADED_JUDGE,
            {},
            arguments.steps,
        ),
        ("plain def, max_concurrency 1 (before #13)", THREADED_JUDGE, {"max_concurrency": 1}, 1),
    ]
    for label, source, options, steps in variants:
        spec = RewardFunctionSpec(name="judge", source=source, **options)
        times = bench(isolation, spec, steps)
        median = statistics.median(times)
        verdict = "met" if median < GOAL_S else "missed"
        print(
            f"{label:45s} median {median:6.3f} s/step  max {max(times):6.3f} s  "
            f"({steps} steps; goal < {GOAL_S} s: {verdict})"
        )


if __name__ == "__main__":
    main()
