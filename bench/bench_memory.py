"""Peak memory of a training step as completions per step grow: micro-batches against one batch.

A ~70M-parameter Qwen2 (random weights, the tiny model's tokenizer) is built offline once. Each
configuration then trains in a fresh subprocess (run_grpo, the service's training path) and
reports its RSS high-water mark (VmHWM) with every step's rewards and advantages. Completions per
step grow 4x (8 -> 32) with a fixed micro batch of 8, against one micro-batch per step
(micro batch = completions per step); the micro-batched and the one-batch runs at 32
completions must record identical rewards and advantages (same seed).

Run: python bench/bench_memory.py [--steps 2] [--completion-tokens 32]   (~5 min on 2 cores)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kept_steps import KeptSteps  # type: ignore[import-not-found]
from random_qwen2 import MID_MODEL, build_random_qwen2  # type: ignore[import-not-found]
from variants import child_result  # type: ignore[import-not-found]

MICRO_BATCH = 8
NUM_GENERATIONS = 8


def run_configuration(args: argparse.Namespace) -> None:
    """In the child: train, then print one JSON line with peak RSS, rewards and advantages."""
    import torch
    from demo_job import demo_spec, run_unisolated  # type: ignore[import-not-found]

    from service.jobs.hyperparameters import Hyperparameters

    torch.set_num_threads(1)

    hyperparameters = Hyperparameters(
        train_steps=args.steps,
        learning_rate=1e-4,
        prompts_per_step=args.completions // NUM_GENERATIONS,
        num_generations=NUM_GENERATIONS,
        micro_batch_size=args.micro_batch,
        max_completion_length=args.completion_tokens,
        lr_scheduler_type="constant",
        checkpoint_every=100_000,
        seed=0,
    )
    observer = KeptSteps()
    with tempfile.TemporaryDirectory() as output:
        spec = demo_spec(str(args.model), hyperparameters, Path(output), Path(output))
        run_unisolated(spec, observer)
    print(
        json.dumps(
            {
                "peak_rss_mb": _peak_rss_mb(),
                "totals": [[c.total for c in r.completions] for r in observer.records],
                "advantages": [[c.advantage for c in r.completions] for r in observer.records],
                "step_s": [r.duration_s for r in observer.records],
            }
        )
    )


def _peak_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def measure(
    model: Path, *, completions: int, micro_batch: int, args: argparse.Namespace
) -> dict[str, Any]:
    command = [
        __file__,
        "--child",
        "--model",
        str(model),
        "--completions",
        str(completions),
        "--micro-batch",
        str(micro_batch),
        "--steps",
        str(args.steps),
        "--completion-tokens",
        str(args.completion_tokens),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    return child_result(command, what=f"{completions}/{micro_batch}", env=env)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--completion-tokens", type=int, default=32)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--model", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--completions", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--micro-batch", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        run_configuration(args)
        return

    model = build_random_qwen2(Path(tempfile.gettempdir()) / "rft-bench-mid-qwen2", MID_MODEL)
    parameters = _parameter_count(model)
    print(
        f"model: Qwen2, {parameters / 1e6:.1f}M parameters, random weights; "
        f"load {os.getloadavg()[0]:.1f}"
    )
    print(
        f"{args.steps} steps, {args.completion_tokens}-token completions, "
        f"{NUM_GENERATIONS} per prompt"
    )
    print(f"{'completions/step':>16} {'micro batch':>11} {'peak RSS MB':>11} {'s/step':>7}")
    runs: dict[tuple[int, int], dict[str, Any]] = {}
    for completions in (8, 16, 32):
        for micro_batch in sorted({MICRO_BATCH, completions}):
            run = measure(model, completions=completions, micro_batch=micro_batch, args=args)
            runs[(completions, micro_batch)] = run
            step_s = sum(run["step_s"]) / len(run["step_s"])
            print(f"{completions:>16} {micro_batch:>11} {run['peak_rss_mb']:>11.0f} {step_s:>7.2f}")

    split, whole = runs[(32, MICRO_BATCH)], runs[(32, 32)]
    same = split["totals"] == whole["totals"] and split["advantages"] == whole["advantages"]
    print(
        f"32 completions, micro batch {MICRO_BATCH} vs 32: rewards and advantages of "
        f"{args.steps} steps {'IDENTICAL' if same else 'DIFFER'}"
    )
    flat = runs[(32, MICRO_BATCH)]["peak_rss_mb"] - runs[(8, MICRO_BATCH)]["peak_rss_mb"]
    grown = runs[(32, 32)]["peak_rss_mb"] - runs[(8, 8)]["peak_rss_mb"]
    print(
        f"8 -> 32 completions: peak RSS +{flat:.0f} MB with micro batch {MICRO_BATCH}, "
        f"+{grown:.0f} MB as one batch"
    )
    print(f"load at end {os.getloadavg()[0]:.1f}")


def _parameter_count(model: Path) -> int:
    from safetensors import safe_open

    with safe_open(str(model / "model.safetensors"), "pt") as weights:
        return sum(math.prod(weights.get_slice(name).get_shape()) for name in weights.keys())  # noqa: SIM118


if __name__ == "__main__":
    main()
