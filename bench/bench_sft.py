"""Supervised fine-tuning (method "sft"): what the service costs a step against TRL alone, and
whether it trains exactly like it.

The same SFT job (tiny model "rft-tiny", 64 chat rows, LoRA r16 on all linear layers, batch 8,
max_length 64, learning rate 2e-2 constant, seed 0, N steps), run
(a) bare: a plain TRL SFTTrainer + PEFT LoRA script, its SFTConfig written out (and checked
    field by field against the worker's workers/training/sft.py:sft_config);
(b) run_sft, the worker's training code, in this process with an observer that records nothing;
(c) run_sft with the worker's DatabaseObserver (each step stored in Postgres);
(d) the service: a LocalStack (embedded Postgres and Redis, API, one Celery worker), the dataset
    uploaded and the job created over HTTP and waited for.
Rounds run a, b, c, d, a, b, c, d ... so that the shared machine's load hits all alike.

Per step: the wall time between consecutive steps' ends (step 2 on), for (d) from the steps
rows' created_at. Parity: per-step losses of every variant against the bare script's.

Run: python bench/bench_sft.py [--steps 50] [--rounds 2]
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx
import torch
from datasets import Dataset
from in_process import (  # type: ignore[import-not-found]
    THREADS_ENV,
    Run,
    TimedObserver,
    bare_cpu_arguments,
    differing_fields,
    local_service,
    recording_observer,
    train_bare,
    use_one_thread,
    wait_for_steps,
)
from peft import LoraConfig
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    TrainerControl,
    TrainerState,
    TrainingArguments,
)
from trl import SFTConfig, SFTTrainer

from service.base_models.built_in.tiny_model import ensure_tiny_model
from service.jobs.hyperparameters import Hyperparameters
from workers.training.sft import run_sft, sft_config
from workers.training.spec import TrainingSpec
from workers.training.step_records import RewardConfig
from workers.training.trainer_common import StepLog, StepLogs

WORDS = ["apple", "banana", "cat", "dog", "alpha", "beta", "gamma", "data", "model", "token"]
ROWS = [
    {
        "messages": [
            {"role": "user", "content": f"Repeat {WORDS[i % len(WORDS)]} {i % 4 + 1} times"},
            {"role": "assistant", "content": " ".join([WORDS[i % len(WORDS)]] * (i % 4 + 1))},
        ]
    }
    for i in range(64)
]
HYPERPARAMETERS: dict[str, Any] = {
    "preset": "tiny-cpu",  # learning rate 2e-2, constant, no warmup
    "batch_size": 8,
    "max_length": 64,
    "checkpoint_every": 25,
    "seed": 0,
}


def hyperparameters(steps: int) -> Hyperparameters:
    return Hyperparameters.model_validate({**HYPERPARAMETERS, "train_steps": steps})


def spec(steps: int, output_dir: Path, work: Path) -> TrainingSpec:
    return TrainingSpec(
        base_model="rft-tiny",
        method="sft",
        dataset=ROWS,
        reward_config=RewardConfig(version=1, functions=[]),
        hyperparameters=hyperparameters(steps),
        output_dir=output_dir,
        model_cache_dir=work / "models",
    )


def bare_config(steps: int, output_dir: Path) -> SFTConfig:
    """The SFTConfig a user would write to match the worker's sft_config on CPU."""
    hp = hyperparameters(steps)
    return SFTConfig(
        output_dir=str(output_dir),
        per_device_train_batch_size=8,
        per_device_eval_batch_size=8,
        max_length=64,
        **bare_cpu_arguments(hp, steps=steps, seed=0),
    )


def config_differences(steps: int, work: Path) -> list[str]:
    output_dir = work / "compare"
    ours = sft_config(spec(steps, output_dir, work), use_cuda=False, use_bf16=False).to_dict()
    bare = bare_config(steps, output_dir).to_dict()
    # The run's name is the job id in trackers; nothing reads it here.
    return differing_fields(ours, bare, ignored=("run_name",))


class StepClock(StepLogs):
    def __init__(self) -> None:
        self.ends: list[float] = []
        self.losses: list[float] = []

    def on_step_logged(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, logs: StepLog
    ) -> None:
        self.ends.append(time.perf_counter())
        self.losses.append(float(logs["loss"]))


def run_bare(steps: int, work: Path) -> Run:
    run = Run("bare TRL SFT script")
    started = time.perf_counter()
    model_dir = ensure_tiny_model(work / "models")
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    trainer = SFTTrainer(
        model=model,
        args=bare_config(steps, work / f"bare-{time.monotonic_ns()}"),
        train_dataset=Dataset.from_list(ROWS),
        processing_class=tokenizer,
        peft_config=LoraConfig(
            r=16,
            lora_alpha=32,
            lora_dropout=0.0,
            target_modules="all-linear",
            task_type="CAUSAL_LM",
        ),
    )
    clock = StepClock()
    train_bare(trainer, clock, work / "bare-adapter")
    run.end_to_end_s = time.perf_counter() - started
    run.step_s = [b - a for a, b in itertools.pairwise(clock.ends)]
    run.rewards = clock.losses  # the per-step figure compared for parity: the loss
    return run


class LossObserver(TimedObserver):
    """TimedObserver keeping each step's loss (it keeps a GRPO step's reward)."""

    def on_step(self, record: Any) -> None:
        super().on_step(record)
        self.rewards[-1] = record.loss


def run_in_process(steps: int, work: Path, *, database: bool) -> Run:
    run = Run("run_sft" + (", DatabaseObserver" if database else ", no database"))
    started = time.perf_counter()
    with recording_observer(database) as inner:
        observer = LossObserver(inner)
        run_sft(spec(steps, work / f"in-process-{time.monotonic_ns()}", work), observer)
    run.end_to_end_s = time.perf_counter() - started
    run.step_s = [b - a for a, b in itertools.pairwise(observer.ends)]
    run.rewards = observer.rewards
    run.on_step_s = observer.on_step_s / len(observer.ends)
    return run


def run_service(http: httpx.Client, dataset_id: str, steps: int) -> Run:
    run = Run("service (Celery worker, HTTP)")
    started = time.perf_counter()
    response = http.post(
        "/v1/jobs",
        json={
            "method": "sft",
            "dataset_id": dataset_id,
            "hyperparameters": {**HYPERPARAMETERS, "train_steps": steps},
        },
    )
    response.raise_for_status()
    rows = wait_for_steps(http, response.json()["id"], run, started)
    run.rewards = [row["loss"] for row in rows]
    return run


def summarize(runs: list[Run]) -> None:
    kinds = list(dict.fromkeys(run.kind for run in runs))
    base = statistics.median(s for r in runs if r.kind == kinds[0] for s in r.step_s)
    reference = runs[0].rewards
    print("\n== wall time per step (step 2 on; medians over all rounds), loss parity ==")
    print(
        f"{'variant':<34} {'s/step':>7} {'vs bare':>8} {'p90':>7} {'submit->done':>13}"
        f" {'on_step':>8} {'max |loss - bare|':>18}"
    )
    for kind in kinds:
        group = [r for r in runs if r.kind == kind]
        steps = [s for r in group for s in r.step_s]
        per_step = statistics.median(steps)
        p90 = statistics.quantiles(steps, n=10)[-1]
        done = statistics.median(r.end_to_end_s for r in group)
        on_step = statistics.median(r.on_step_s for r in group)
        diff = max(abs(a - b) for r in group for a, b in zip(reference, r.rewards, strict=True))
        print(
            f"{kind:<34} {per_step:>7.4f} {per_step / base - 1:>+8.1%} {p90:>7.4f}"
            f" {done:>12.1f}s {on_step * 1000:>6.2f}ms {diff:>18.2e}"
        )
    print(
        "on_step: time the training thread spends handing a step to the observer;\n"
        "submit->done: the whole run (model load, dataset preparation, steps, adapter save)."
    )
    print("losses (bare, round 1): " + " ".join(f"{x:.3f}" for x in reference[:10]) + " ...")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    use_one_thread()
    print(f"load average at start: {os.getloadavg()}")
    work = Path(tempfile.mkdtemp(prefix="rft-bench-sft-"))
    differences = config_differences(args.steps, work)
    print(
        "SFTConfig of the bare script vs the worker's sft_config: "
        + ("identical (run_name aside)" if not differences else "; ".join(differences))
    )
    runs: list[Run] = []
    with local_service(work / "stack", THREADS_ENV) as http:
        content = "".join(json.dumps(row) + "\n" for row in ROWS).encode()
        uploaded = http.post("/v1/datasets", files={"file": ("chats.jsonl", content)})
        uploaded.raise_for_status()
        dataset_id = uploaded.json()["id"]
        # Warm every side (imports, the tiny model build) before anything is timed.
        run_service(http, dataset_id, 2)
        run_bare(2, work)
        run_in_process(2, work, database=False)
        for _ in range(args.rounds):
            runs.append(run_bare(args.steps, work))
            runs.append(run_in_process(args.steps, work, database=False))
            runs.append(run_in_process(args.steps, work, database=True))
            runs.append(run_service(http, dataset_id, args.steps))
    summarize(runs)
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
