"""How fast the warm sandbox scores a training-like workload, against a process per completion.

Workload: generation batches of 64 completions scored by a regex format reward, the kind of
function GRPO recipes use. The baseline starts a fresh `python -c` per completion, the
approach of common GRPO tutorials; being slow, it is measured on fewer completions and
reported per completion.

Run: python bench/bench_sandbox.py [--steps 200] [--fresh 192]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sandbox.api import RewardFunctionSpec, ScoringBatch
from sandbox.isolation import detect_isolation, plan_launch, spawn
from sandbox.reward_host import ProcessSandbox
from sandbox.settings import Isolation, SandboxSettings

BATCH_SIZE = 64
FORMAT_REWARD = r"""
import re

PATTERN = re.compile(r"^<think>.*?</think>\s*<answer>(.*?)</answer>$", re.DOTALL)

def format_reward(prompt, completion, example):
    match = PATTERN.match(completion)
    if match is None:
        return 0.0
    return 1.0 if match.group(1).strip() == str(example["answer"]) else 0.5
"""
FRESH_PROCESS_SCRIPT = (
    FORMAT_REWARD
    + "\nimport json, sys\n"
    + "sample = json.load(sys.stdin)\n"
    + "print(format_reward(sample['prompt'], sample['completion'], sample['example']))\n"
)


def make_batch(rng: random.Random, step: int) -> ScoringBatch:
    prompts, completions, examples = [], [], []
    for _ in range(BATCH_SIZE):
        a, b = rng.randint(1, 99), rng.randint(1, 99)
        prompt = f"What is {a} + {b}?"
        answer = a + b + rng.choice([0, 0, 1])
        thinking = " ".join(rng.choice(["add", "carry", "the", "digits", "sum"]) for _ in range(40))
        if rng.random() < 0.8:
            completion = f"<think>{thinking}</think>\n<answer>{answer}</answer>"
        else:
            completion = f"The answer is {answer}"
        prompts.append(prompt)
        completions.append(completion)
        examples.append({"prompt": prompt, "answer": a + b})
    return ScoringBatch(prompts=prompts, completions=completions, examples=examples, step=step)


def bench_warm(isolation: Isolation, batches: list[ScoringBatch]) -> tuple[float, float]:
    """Completions per second, and the median milliseconds per 64-completion step."""
    with ProcessSandbox(SandboxSettings(isolation=isolation)) as sandbox:
        sandbox.load([RewardFunctionSpec(name="format_reward", source=FORMAT_REWARD)])
        for batch in batches[:5]:  # warm-up: imports, regex compile
            sandbox.score(batch)
        step_times = []
        started = time.perf_counter()
        for batch in batches:
            step_started = time.perf_counter()
            result = sandbox.score(batch)["format_reward"]
            step_times.append(time.perf_counter() - step_started)
            assert not result.errors, result.errors
        elapsed = time.perf_counter() - started
    return len(batches) * BATCH_SIZE / elapsed, statistics.median(step_times) * 1000


def bench_fresh_process(isolation: Isolation, batch: ScoringBatch, count: int) -> float:
    """Completions per second with one new interpreter (under `isolation`) per completion."""
    defaults = SandboxSettings(isolation=isolation)
    plan = plan_launch(
        SandboxSettings(isolation=isolation, sandbox_uid=defaults.uid_range_first),
        program=[sys.executable, "-I", "-S", "-c", FRESH_PROCESS_SCRIPT],
    )
    started = time.perf_counter()
    for index in range(count):
        i = index % len(batch.completions)
        sample = {
            "prompt": batch.prompts[i],
            "completion": batch.completions[i],
            "example": batch.examples[i],
        }
        spawned = spawn(plan, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, err = spawned.process.communicate(json.dumps(sample).encode(), timeout=30)
        if spawned.info_fd is not None:
            os.close(spawned.info_fd)
        if spawned.cgroup is not None:
            spawned.cgroup.remove()
        assert spawned.process.returncode == 0, err
        float(out)
    return count / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--steps", type=int, default=200, help="64-completion batches for the warm sandbox"
    )
    parser.add_argument(
        "--fresh", type=int, default=3 * BATCH_SIZE, help="completions for the baseline"
    )
    arguments = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)  # the 'none' mode warning is expected here

    rng = random.Random(0)
    batches = [make_batch(rng, step) for step in range(arguments.steps)]
    modes: list[Isolation] = ["bwrap", "none"] if detect_isolation() else ["none"]
    if len(modes) == 1:
        print(f"bubblewrap unusable ({detect_isolation().reason}); measuring 'none' only")
    print(f"workload: {arguments.steps} steps x {BATCH_SIZE} completions, regex format reward")
    for isolation in modes:
        warm_rate, step_ms = bench_warm(isolation, batches)
        fresh_rate = bench_fresh_process(isolation, batches[0], arguments.fresh)
        print(f"\nisolation={isolation}")
        print(
            f"  warm sandbox:       {warm_rate:12,.0f} completions/s  ({step_ms:.2f} ms per step)"
        )
        print(
            f"  fresh process each: {fresh_rate:12,.1f} completions/s  "
            f"({1000 / fresh_rate:.1f} ms per completion, {arguments.fresh} measured)"
        )
        print(f"  warm / fresh:       {warm_rate / fresh_rate:12,.0f}x")


if __name__ == "__main__":
    main()
