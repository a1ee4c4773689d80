"""A real-size model on a GPU with vLLM generation: the service's training path against a bare
TRL + vLLM script with the same settings, and vLLM's generation speed against transformers'.

The model is built offline: Qwen2.5-0.5B's layer shapes (hidden 896, 24 layers, 14 heads, 2 KV
heads, MLP 4864) with random weights and the tiny model's tokenizer (vocabulary 448), ~360M
parameters. Each phase runs in a fresh subprocess, so vLLM's share of the GPU is released
between them:
- service: run_grpo (what a worker runs) with vLLM colocated generation, LoRA weights synced
  every step, the reward functions in the sandbox;
- bare: GRPOTrainer(use_vllm=True, vllm_mode="colocate") with the same GRPOConfig values and the
  same reward as a plain Python function;
- generation: completion tokens/s of vLLM's LLM.generate and of transformers' generate() on the
  same prompts (n completions each, the same sampling).

Needs CUDA and the `vllm` extra (pip install -e '.[worker,vllm]'); without a GPU it says so and
exits. Where vLLM is not installed (a GPU machine that cannot fetch it) it compares the two with
transformers' generate() instead (--generation transformers), and says so.
Run: python bench/bench_gpu_vllm.py [--steps 12] [--completion-tokens 256] [--generation vllm]
(~10 min)
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kept_steps import KeptSteps  # type: ignore[import-not-found]
from phases import PhaseClock, dtypes, patch_grpo_train, phase_table  # type: ignore[import-not-found]
from random_qwen2 import HALF_B_MODEL, build_random_qwen2  # type: ignore[import-not-found]
from variants import child_result  # type: ignore[import-not-found]

PROMPTS_PER_STEP = 4
NUM_GENERATIONS = 8
# Steps before this one include vLLM's warm-up (CUDA graphs, first weight sync): not timed.
FIRST_TIMED_STEP = 3


def timing_phases() -> dict[str, Any]:
    """Times this process's GRPOTrainer.train() by phase (bench/phases.py); the dict gets the
    steps and dtypes once train() returns."""
    found: dict[str, Any] = {"phases": [], "dtypes": {}}

    def keep(clock: PhaseClock, trainer: Any) -> None:
        found["phases"], found["dtypes"] = clock.steps, dtypes(trainer)

    patch_grpo_train(keep)
    return found


def phase_report(service: dict[str, Any], bare: dict[str, Any]) -> str:
    """The per-phase table of two phase results, from FIRST_TIMED_STEP on (the clock's first
    entry is step 2: a step is timed from the end of the one before)."""
    skip = FIRST_TIMED_STEP - 2
    return phase_table(
        service["phases"][skip:],
        bare["phases"][skip:],
        service_dtypes=service["dtypes"],
        bare_dtypes=bare["dtypes"],
    )


def hyperparameters(args: argparse.Namespace) -> Any:
    from service.jobs.hyperparameters import Hyperparameters

    # The real-model defaults, with the run's length; no warmup so every step trains alike.
    return Hyperparameters(
        train_steps=args.steps,
        prompts_per_step=PROMPTS_PER_STEP,
        num_generations=NUM_GENERATIONS,
        max_completion_length=args.completion_tokens,
        lr_scheduler_type="constant",
        checkpoint_every=100_000,
        seed=0,
    )


def phase_service(args: argparse.Namespace) -> dict[str, Any]:
    import torch
    from demo_job import demo_spec, run_unisolated  # type: ignore[import-not-found]

    from service.settings import Settings
    from workers.training.colocated_vllm_sizing import colocated_memory_plan
    from workers.training.generation import choose_generation

    generation = choose_generation(
        Settings(generation_backend=args.generation, vllm_mode="colocate")
    )
    observer = KeptSteps()
    timed = timing_phases()
    with tempfile.TemporaryDirectory() as output:
        spec = demo_spec(
            str(args.model), hyperparameters(args), Path(output), Path(output), generation
        )
        # vLLM's share as the worker computes it (service/gpu/memory_plan.py), and what torch
        # then measured: the plan's sum against the peak.
        plan = colocated_memory_plan(spec, str(args.model))
        torch.cuda.reset_peak_memory_stats()
        run_unisolated(spec, observer)
        peak_reserved = torch.cuda.max_memory_reserved() / 1024**3
        peak_allocated = torch.cuda.max_memory_allocated() / 1024**3
    return {
        "memory_plan": None
        if plan is None
        else f"utilization {plan.utilization}: {plan.arithmetic()} of {plan.device_gib:.1f} GiB",
        "peak_gib": [peak_allocated, peak_reserved],
        "step_s": [record.duration_s for record in observer.records],
        "generation": generation.describe(),
        "mean_length": [
            record.extra_metrics.get("completions/mean_length") for record in observer.records
        ],
        **timed,
    }


def phase_bare(args: argparse.Namespace) -> dict[str, Any]:
    """What a user would write with TRL alone, matching the service's settings."""
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from service.demo import demo_dataset
    from service.demo.rewards import letter_fraction
    from workers.training.grpo import grpo_objective_arguments

    hp = hyperparameters(args)
    rows = demo_dataset()

    def reward(prompts: list[Any], completions: list[str], **columns: Any) -> list[float | None]:
        letters = columns["target_letter"]
        return [
            float(letter_fraction(p, c, {"target_letter": t}))
            for p, c, t in zip(prompts, completions, letters, strict=True)
        ]

    class StepTimer(TrainerCallback):
        def __init__(self) -> None:
            self.started = 0.0
            self.durations: list[float] = []

        def on_step_begin(self, *_: Any, **__: Any) -> None:
            self.started = time.perf_counter()

        def on_step_end(self, *_: Any, **__: Any) -> None:
            self.durations.append(time.perf_counter() - self.started)

    timer = StepTimer()
    timed = timing_phases()
    with tempfile.TemporaryDirectory() as output:
        config = GRPOConfig(
            output_dir=output,
            per_device_train_batch_size=hp.resolved_micro_batch_size,
            gradient_accumulation_steps=hp.gradient_accumulation_steps,
            steps_per_generation=hp.gradient_accumulation_steps,
            **grpo_objective_arguments(hp),
            learning_rate=hp.learning_rate,
            lr_scheduler_type=hp.lr_scheduler_type,
            max_grad_norm=hp.max_grad_norm,
            max_steps=hp.train_steps,
            seed=hp.seed,
            bf16=True,
            activation_checkpointing=True,
            use_vllm=args.generation == "vllm",
            vllm_mode="colocate",
            vllm_gpu_memory_utilization=0.3,
            logging_steps=1,
            save_strategy="no",
            report_to="none",
            disable_tqdm=True,
        )
        trainer = GRPOTrainer(
            model=str(args.model),
            reward_funcs=[reward],
            args=config,
            train_dataset=Dataset.from_list(
                [{"prompt": r["prompt"], "target_letter": r["target_letter"]} for r in rows]
            ),
            peft_config=LoraConfig(
                r=hp.lora_rank, lora_alpha=hp.lora_alpha, target_modules="all-linear"
            ),
            callbacks=[timer],
        )
        trainer.train()
        lengths = [
            entry["completions/mean_length"]
            for entry in trainer.state.log_history
            if "completions/mean_length" in entry
        ]
        model: Any = trainer.model
        dtype = str(next(model.parameters()).dtype)
    return {"step_s": timer.durations, "mean_length": lengths, "dtype": dtype, **timed}


def generation_prompts(args: argparse.Namespace) -> list[str]:
    from transformers import AutoTokenizer

    from service.demo import demo_dataset

    tokenizer = AutoTokenizer.from_pretrained(str(args.model))
    return [
        str(
            tokenizer.apply_chat_template(
                [{"role": "user", "content": row["prompt"]}],
                tokenize=False,
                add_generation_prompt=True,
            )
        )
        for row in demo_dataset()[: args.generation_prompts]
    ]


def phase_generate_vllm(args: argparse.Namespace) -> dict[str, Any]:
    from vllm import LLM, SamplingParams

    prompts = generation_prompts(args)
    llm = LLM(model=str(args.model), gpu_memory_utilization=0.5, dtype="bfloat16", seed=0)
    params = SamplingParams(
        n=NUM_GENERATIONS, temperature=1.0, max_tokens=args.completion_tokens, ignore_eos=True
    )
    llm.generate(prompts[:2], params)  # warm-up
    started = time.perf_counter()
    outputs = llm.generate(prompts, params)
    elapsed = time.perf_counter() - started
    tokens = sum(len(c.token_ids) for o in outputs for c in o.outputs)
    return {"tokens": tokens, "seconds": elapsed}


def phase_generate_transformers(args: argparse.Namespace) -> dict[str, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    prompts = generation_prompts(args)
    tokenizer = AutoTokenizer.from_pretrained(str(args.model), padding_side="left")
    model: Any = AutoModelForCausalLM.from_pretrained(str(args.model), dtype=torch.bfloat16)
    model = model.cuda()
    inputs = tokenizer(prompts, return_tensors="pt", padding=True).to("cuda")

    def generate() -> int:
        output = model.generate(
            **inputs,
            do_sample=True,
            temperature=1.0,
            num_return_sequences=NUM_GENERATIONS,
            max_new_tokens=args.completion_tokens,
            min_new_tokens=args.completion_tokens,  # like ignore_eos: the same token count
        )
        return int((output.shape[1] - inputs["input_ids"].shape[1]) * output.shape[0])

    generate()  # warm-up
    torch.cuda.synchronize()
    started = time.perf_counter()
    tokens = generate()
    torch.cuda.synchronize()
    return {"tokens": tokens, "seconds": time.perf_counter() - started}


PHASES = {
    "service": phase_service,
    "bare": phase_bare,
    "generate-vllm": phase_generate_vllm,
    "generate-transformers": phase_generate_transformers,
}


def run_phase(name: str, args: argparse.Namespace) -> dict[str, Any]:
    command = [
        __file__,
        "--phase",
        name,
        "--model",
        str(args.model),
        "--steps",
        str(args.steps),
        "--completion-tokens",
        str(args.completion_tokens),
        "--generation-prompts",
        str(args.generation_prompts),
        "--generation",
        args.generation,
    ]
    return child_result(command, what=f"phase {name}")


def timed_median(durations: list[float]) -> float:
    return statistics.median(durations[FIRST_TIMED_STEP - 1 :])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--completion-tokens", type=int, default=256)
    parser.add_argument("--generation-prompts", type=int, default=32)
    parser.add_argument(
        "--generation",
        choices=("vllm", "transformers"),
        help="how both sides generate (default: vllm where it is installed, else transformers)",
    )
    parser.add_argument("--phase", choices=sorted(PHASES), help=argparse.SUPPRESS)
    parser.add_argument("--model", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()

    import torch

    if not torch.cuda.is_available():
        sys.exit(
            "bench_gpu_vllm: no CUDA device here. This benchmark needs a GPU and the `vllm` "
            "extra (pip install -e '.[worker,vllm]'); nothing was measured."
        )
    if args.steps <= FIRST_TIMED_STEP:
        sys.exit(f"--steps must be more than {FIRST_TIMED_STEP}: earlier steps are warm-up")
    if args.generation is None:
        args.generation = "vllm" if importlib.util.find_spec("vllm") else "transformers"
        if args.generation == "transformers":
            print("vLLM is not installed here: both sides generate with transformers")
    if args.phase is not None:
        print(json.dumps(PHASES[args.phase](args)))
        return

    args.model = build_random_qwen2(
        Path(tempfile.gettempdir()) / "rft-bench-qwen2-0.5b-shape", HALF_B_MODEL
    )
    print(f"GPU: {torch.cuda.get_device_name(0)}; model: {args.model}")
    print(
        f"{args.steps} steps of {PROMPTS_PER_STEP} x {NUM_GENERATIONS} completions, "
        f"{args.completion_tokens} tokens; median from step {FIRST_TIMED_STEP}"
    )
    service, bare = run_phase("service", args), run_phase("bare", args)
    for name, run in (("service", service), ("bare", bare)):
        steps = ", ".join(f"{s:.2f}" for s in run["step_s"])
        lengths = ", ".join(f"{n:.0f}" for n in run["mean_length"] if n is not None)
        print(f"{name}: steps [{steps}] s; mean completion tokens [{lengths}]")
    print(f"bare model's parameters: {bare['dtype']}")
    print(f"per phase, median ms per step from step {FIRST_TIMED_STEP}:")
    print(phase_report(service, bare))
    allocated, reserved = service["peak_gib"]
    print(
        f"service memory: plan {service['memory_plan'] or 'none (not colocated vLLM)'}; "
        f"peak torch measured {allocated:.2f} GiB allocated, {reserved:.2f} GiB reserved "
        "(vLLM's memory outside torch's allocator not included)"
    )
    service_s, bare_s = timed_median(service["step_s"]), timed_median(bare["step_s"])
    print(f"service ({service['generation']}): {service_s:.3f} s/step")
    print(
        f"bare TRL ({args.generation}):  {bare_s:.3f} s/step  "
        f"(service/bare {service_s / bare_s:.3f}x)"
    )
    engines = ("vllm", "transformers") if args.generation == "vllm" else ("transformers",)
    for name in (f"generate-{engine}" for engine in engines):
        run = run_phase(name, args)
        print(f"{name}: {run['tokens'] / run['seconds']:,.0f} completion tokens/s")
    print(f"load at end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
