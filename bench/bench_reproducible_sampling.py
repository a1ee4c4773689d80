"""What reproducible_sampling costs generation: keyed Gumbel noise against torch's sampler.

(a) The trainer's own generation (RecordingGRPOTrainer._generate_single_turn, the path a job
    runs) on the tiny model: the same prompts, normal sampling and reproducible sampling in
    alternating rounds; seconds per call and microseconds per generated token, medians.
(b) The noise alone (keyed_gumbel) for one decoding step of a batch, at the tiny model's
    vocabulary and at real ones (32k: Llama 2/Mistral; 152k: Qwen2.5), on this machine's
    device: what it adds per generated token to a real model, whose forward pass it rides on.

Run: python bench/bench_reproducible_sampling.py [--rounds 7] [--batch 16] [--tokens 64]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from sandbox.reward_host import create_sandbox
from sandbox.settings import SandboxSettings
from service.demo import demo_dataset
from service.jobs.hyperparameters import PRESETS, Hyperparameters
from tests.training.harness import letter_config
from workers.training.grpo import TrainingSpec, build_trainer
from workers.training.reproducible_sampling import keyed_gumbel
from workers.training.reward_dispatch import RewardDispatcher


def median_time(call: Callable[[], Any], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def bench_generation(rounds: int, batch: int, tokens: int) -> None:
    work = Path(tempfile.mkdtemp(prefix="rft-bench-sampling-"))
    sandbox = create_sandbox(SandboxSettings(isolation="none"))
    trainer: Any = None
    try:
        hyperparameters = Hyperparameters(
            **{**PRESETS["tiny-cpu"], "max_completion_length": tokens, "train_steps": 1}
        )
        spec = TrainingSpec(
            base_model="rft-tiny",
            dataset=demo_dataset(),
            reward_config=letter_config(),
            hyperparameters=hyperparameters,
            output_dir=work / "run",
            model_cache_dir=work / "models",
        )
        trainer = build_trainer(spec, RewardDispatcher(sandbox, spec.reward_config, spec.dataset))
        prompts = [row["prompt"] for row in demo_dataset()[: batch // 2]] * 2
        prompt_ids, _, _ = trainer._tokenize_prompts(prompts)
        results: dict[bool, list[tuple[float, int]]] = {False: [], True: []}
        for _ in range(rounds):
            for reproducible in (False, True):
                trainer.reproducible_sampling = reproducible
                started = time.perf_counter()
                completions, _ = trainer._generate_single_turn(prompt_ids, None, {}, 1)
                elapsed = time.perf_counter() - started
                results[reproducible].append((elapsed, sum(len(ids) for ids in completions)))
                trainer.state.global_step += 1
        print(f"(a) trainer generation, tiny model, {batch} completions x {tokens} tokens max:")
        per_token = {}
        for reproducible, runs in results.items():
            seconds = statistics.median(elapsed for elapsed, _ in runs)
            per_token[reproducible] = statistics.median(
                elapsed / generated * 1e6 for elapsed, generated in runs
            )
            name = "reproducible" if reproducible else "normal      "
            print(
                f"  {name}: {seconds:.4f} s per call, {per_token[reproducible]:.1f} us per "
                f"generated token (median of {rounds})"
            )
        print(f"  overhead: {per_token[True] / per_token[False] - 1:+.1%} per token")
    finally:
        sandbox.close()


def bench_noise(batch: int, repeats: int) -> None:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    indices = torch.arange(batch, device=device)
    print(f"(b) keyed_gumbel for one decoding step of {batch} rows on {device}:")
    for vocab in (512, 32_000, 151_936):

        def noise(vocab_size: int = vocab) -> None:
            keyed_gumbel(seed=0, step=1, sample_indices=indices, position=3, vocab_size=vocab_size)
            if device == "cuda":
                torch.cuda.synchronize()

        noise()
        seconds = median_time(noise, repeats)
        print(f"  vocab {vocab:>7}: {seconds * 1e3:.3f} ms per token step")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=64)
    args = parser.parse_args()
    print(f"torch threads: {torch.get_num_threads()}")
    bench_generation(args.rounds, args.batch, args.tokens)
    bench_noise(args.batch, repeats=max(3, args.rounds))


if __name__ == "__main__":
    main()
