"""What the service costs a training run, and whether it trains exactly like TRL alone.

The same GRPO job, the demo job (tiny model "rft-tiny", the demo dataset, reward
letter_fraction weight 1.0 + brevity weight 0.02, seed 0, N steps), run
(a) bare: a plain TRL GRPOTrainer + PEFT LoRA in this process, the rewards as in-process
    Python functions, the GRPOConfig of workers/training/grpo.py:_grpo_config written out
    (and checked field by field against it);
(b) service: a LocalStack (embedded Postgres and Redis, API, one Celery worker), the dataset
    uploaded over HTTP, the job created over HTTP and waited for.
Rounds alternate a, b, a, b so that the shared machine's load hits both alike.

Per step: (a) the wall time between consecutive steps; (b) the same from the steps rows'
created_at (each written as its step ends) and the recorded duration_s; plus submit -> done.
Parity: per-step reward means of (a) and (b), max abs difference.

Per phase (bench/phases.py): both sides' GRPOTrainer is timed by the same wrappers, the
bare one in this process, the service's in its rank process (bench/phase_hook/sitecustomize.py
on the stack's PYTHONPATH writes each run's phases to a folder this script reads); the table
gives each phase's median seconds per step, the service's extra, and service/bare.

--model 13m: a 13M-parameter Qwen2 (hidden 384, 6 layers) built offline with the tiny model's
tokenizer, given to the service as a path under RFT_MODEL_ROOTS. --generation vllm: both sides
generate with vLLM colocated (run it with .venv-vllm/bin/python: scripts/setup_vllm.sh).
--variants: also run_grpo in this process with the sandbox and the database put back one at a
time (the older breakdown).

Run: python bench/bench_overhead.py [--steps 50] [--rounds 2] [--model tiny|13m]
     [--generation transformers|vllm] [--variants]
"""

from __future__ import annotations

import argparse
import itertools
import logging
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx
import torch
from datasets import Dataset
from demo_job import demo_hyperparameters, demo_spec  # type: ignore[import-not-found]
from in_process import (  # type: ignore[import-not-found]
    THREADS_ENV,
    InProcessSandbox,
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
from phases import (  # type: ignore[import-not-found]
    PHASES_DIR_ENV,
    PhaseClock,
    dtypes,
    patch_grpo_train,
    phase_table,
    read_phases,
)
from random_qwen2 import QWEN2_13M, build_random_qwen2  # type: ignore[import-not-found]
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    TrainerControl,
    TrainerState,
    TrainingArguments,
)
from trl import GRPOConfig, GRPOTrainer

from sandbox.api import RewardSandbox
from sandbox.reward_host import ProcessSandbox
from service.base_models.built_in.tiny_model import ensure_tiny_model
from service.demo import (
    DEMO_BASE_MODEL,
    demo_dataset,
    demo_reward_functions,
    demo_rewards_source,
)
from service.demo.follow import DEMO_DIR, demo_job_request
from service.reward_functions.totals import weighted_total
from service.settings import get_settings, sandbox_settings
from workers.training.generation import Generation, choose_generation, transformers_generation
from workers.training.grpo import _grpo_config, grpo_objective_arguments, run_grpo
from workers.training.trainer_common import StepLog, StepLogs

BENCH_DIR = Path(__file__).resolve().parent


@dataclass
class Setup:
    """What both sides train: the model (the service's name for it, the bare side's folder)
    and how both generate."""

    base_model: str
    model_dir: Path
    generation: Generation


# Every GRPOTrainer.train() in this process (the bare runs, the in-process variants) is timed
# by phase; its clock lands here.
TIMED_TRAINS: list[tuple[PhaseClock, dict[str, str]]] = []


def _keep_phases(clock: PhaseClock, trainer: Any) -> None:
    TIMED_TRAINS.append((clock, dtypes(trainer)))


def bare_config(
    steps: int, output_dir: Path, *, summed: bool = False, generation: Generation | None = None
) -> GRPOConfig:
    """The GRPOConfig a user would write to match the service's _grpo_config on CPU."""
    hp = demo_hyperparameters(steps)
    generation = generation or transformers_generation()
    return GRPOConfig(
        output_dir=str(output_dir),
        per_device_train_batch_size=hp.completions_per_step,
        gradient_accumulation_steps=1,
        steps_per_generation=1,
        num_iterations=1,
        **grpo_objective_arguments(hp),
        **bare_cpu_arguments(hp, steps=hp.train_steps, seed=hp.seed),
        shuffle_dataset=True,
        remove_unused_columns=False,
        save_total_limit=None,
        log_completions=False,
        max_tool_calling_iterations=hp.max_turns,
        # The one addition: TRL weighs several reward functions itself.
        reward_weights=None if summed else [spec.weight for spec in demo_reward_functions()],
        # Generation: what the worker's settings select (vLLM colocated, its share of memory).
        **generation.grpo_arguments(hp),
    )


def config_differences(steps: int, output_dir: Path, setup: Setup) -> list[str]:
    """Fields where bare_config differs from what the worker builds (reward_weights aside, and
    run_name: the worker names the run after the job)."""
    hp = demo_hyperparameters(steps)
    spec = demo_spec(setup.base_model, hp, output_dir, output_dir, setup.generation)
    service = _grpo_config(
        spec, use_cuda=False, use_bf16=False, model_path=str(setup.model_dir)
    ).to_dict()
    bare = bare_config(steps, output_dir, generation=setup.generation).to_dict()
    return differing_fields(service, bare, ignored=("reward_weights", "run_name"))


def demo_reward_callables() -> list[Any]:
    """The demo's per-sample functions in TRL's batch form, run in this process."""
    namespace: dict[str, Any] = {}
    exec(demo_rewards_source(), namespace)  # our own bundled demo code

    def wrap(name: str) -> Any:
        function = namespace[name]

        def batch(
            prompts: list[str], completions: list[str], target_letter: list[str], **_: Any
        ) -> list[float]:
            return [
                float(function(p, c, {"prompt": p, "target_letter": t}))
                for p, c, t in zip(prompts, completions, target_letter, strict=True)
            ]

        batch.__name__ = name
        return batch

    return [wrap(spec.name) for spec in demo_reward_functions()]


class StepClock(StepLogs):
    def __init__(self, run: Run) -> None:
        self.run = run
        self.ends: list[float] = []
        self.first_begin: float | None = None

    def on_step_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **_: Any
    ) -> None:
        if self.first_begin is None:
            self.first_begin = time.perf_counter()

    def on_step_logged(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, logs: StepLog
    ) -> None:
        self.ends.append(time.perf_counter())
        self.run.rewards.append(float(logs["reward"]))
        self.run.function_means.append(
            {key: float(value) for key, value in logs.items() if key.startswith("rewards/")}
        )


def summed_reward_callable() -> Any:
    """The demo's functions summed in float64 in one TRL reward, as the worker's dispatcher does
    (TRL itself weighs several functions in float32)."""
    functions = demo_reward_callables()
    weights = [spec.weight for spec in demo_reward_functions()]

    def rft_reward(**kwargs: Any) -> list[float | None]:
        scores = [function(**kwargs) for function in functions]
        return [weighted_total(list(sample), weights) for sample in zip(*scores, strict=True)]

    return rft_reward


def run_bare(steps: int, work: Path, setup: Setup, *, summed: bool = False) -> Run:
    run = Run("bare, one summed reward" if summed else "bare")
    started = time.perf_counter()
    model_dir = setup.model_dir
    if setup.generation.vllm_on_cpu:
        # vLLM's CPU backend repacks linear weights, which TRL's weight sync cannot load into;
        # what any TRL script on vLLM-CPU needs (docs/measured-facts.md). Not on CUDA.
        from workers.training.vllm_cpu import keep_plain_linear_weights

        keep_plain_linear_weights()
    tokenizer = AutoTokenizer.from_pretrained(
        model_dir, padding_side="left", truncation_side="left"
    )
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    hp = demo_hyperparameters(steps)
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[summed_reward_callable()] if summed else demo_reward_callables(),
        args=bare_config(
            steps,
            work / f"bare-{time.monotonic_ns()}",
            summed=summed,
            generation=setup.generation,
        ),
        train_dataset=Dataset.from_list(demo_dataset()),
        processing_class=tokenizer,
        peft_config=LoraConfig(
            r=hp.lora_rank,
            lora_alpha=hp.lora_alpha,
            lora_dropout=hp.lora_dropout,
            target_modules=hp.lora_target_modules,
            task_type="CAUSAL_LM",
        ),
    )
    clock = StepClock(run)
    train_bare(trainer, clock, work / "bare-adapter")
    if setup.generation.uses_vllm:
        from workers.training.generation import release_vllm

        release_vllm(trainer)  # as the worker does after a job: the next run starts its own
    timed, run.dtypes = TIMED_TRAINS[-1]
    run.phases, run.events = timed.steps, timed.events
    run.end_to_end_s = time.perf_counter() - started
    run.step_s = [b - a for a, b in itertools.pairwise(clock.ends)]
    assert clock.first_begin is not None
    run.train_s = clock.ends[-1] - clock.first_begin
    return run


def run_in_process(steps: int, work: Path, setup: Setup, *, sandboxed: bool, database: bool) -> Run:
    """run_grpo (the worker's training code) in this process, parts of the service swapped out."""
    kind = "run_grpo" + (", bwrap sandbox" if sandboxed else ", in-process rewards")
    run = Run(kind + (", DatabaseObserver" if database else ", no database"))
    sandbox: RewardSandbox = (
        ProcessSandbox(sandbox_settings(get_settings(), allow_network=False, secrets={}))
        if sandboxed
        else InProcessSandbox()
    )
    with recording_observer(database) as inner:
        observer = TimedObserver(inner)
        spec = demo_spec(
            setup.base_model,
            demo_hyperparameters(steps),
            work / f"in-process-{time.monotonic_ns()}",
            work / "models",
            setup.generation,
        )
        try:
            run_grpo(spec, sandbox, observer)
        finally:
            sandbox.close()
    run.step_s = [b - a for a, b in itertools.pairwise(observer.ends)]
    run.rewards = observer.rewards
    run.reads_s = observer.reads_s / len(observer.ends)
    run.on_step_s = observer.on_step_s / len(observer.ends)
    return run


def run_service(http: httpx.Client, steps: int, setup: Setup, phases_dir: Path) -> Run:
    run = Run("service")
    started = time.perf_counter()
    since_ns = time.time_ns()
    with open(DEMO_DIR / "dataset.jsonl", "rb") as handle:
        response = http.post("/v1/datasets", files={"file": ("demo.jsonl", handle)})
    response.raise_for_status()
    request = demo_job_request(response.json()["id"], train_steps=steps)
    request["base_model"] = setup.base_model
    response = http.post("/v1/jobs", json=request)
    response.raise_for_status()
    rows = wait_for_steps(http, response.json()["id"], run, started)
    run.rewards = [row["reward_mean"] for row in rows]
    run.function_means = [
        {name: metrics["mean"] for name, metrics in row["reward_functions"].items()} for row in rows
    ]
    run.train_s = sum(run.step_s) + rows[0]["duration_s"]
    timed = read_phases(phases_dir, since_ns)
    if len(timed) != 1:
        raise RuntimeError(f"expected one phase file from the rank process, found {len(timed)}")
    run.phases, run.dtypes, run.events = timed[0]["steps"], timed[0]["dtypes"], timed[0]["events"]
    return run


def summarize(runs: list[Run]) -> None:
    bare = [r for r in runs if r.kind == "bare"]
    service = [r for r in runs if r.kind == "service"]
    bare_step = statistics.median(s for r in bare for s in r.step_s)
    service_step = statistics.median(s for r in service for s in r.step_s)
    service_recorded = statistics.median(s for r in service for s in r.recorded_duration_s)
    bare_mean = statistics.fmean(s for r in bare for s in r.step_s)
    service_mean = statistics.fmean(s for r in service for s in r.step_s)
    print("\n== wall time per step (steady state, step 2 on; median over all rounds) ==")
    print(f"bare TRL script           {bare_step:.4f} s   (mean {bare_mean:.4f})")
    print(f"service, step to step     {service_step:.4f} s   (mean {service_mean:.4f})")
    print(f"service, recorded         {service_recorded:.4f} s   (duration_s: generation..log)")
    print(f"ratio service/bare        {service_step / bare_step:.3f}  (goal <= 1.03)")
    for kind, group in (("bare", bare), ("service", service)):
        print(
            f"{kind:<8} per round: s/step "
            + ", ".join(f"{statistics.median(r.step_s):.4f}" for r in group)
            + "; training "
            + ", ".join(f"{r.train_s:.1f}" for r in group)
            + " s; submit->done "
            + ", ".join(f"{r.end_to_end_s:.1f}" for r in group)
            + " s"
        )

    print("\n== parity: per-step reward mean, same seed ==")
    reference = bare[0].rewards
    for run in runs:
        diffs = [abs(a - b) for a, b in zip(reference, run.rewards, strict=True)]
        first = next((i + 1 for i, d in enumerate(diffs) if d > 1e-6), None)
        print(
            f"{run.kind:<8} vs bare round 1: max abs diff {max(diffs):.2e}; "
            f"first step differing by > 1e-6: {first}"
        )
    print("rewards (bare r1):    " + " ".join(f"{r:.3f}" for r in reference[:12]) + " ...")
    print("rewards (service r1): " + " ".join(f"{r:.3f}" for r in service[0].rewards[:12]) + " ...")

    print("\n== per phase: median ms per step, all rounds (bench/phases.py) ==")
    print(
        phase_table(
            [step for run in service for step in run.phases],
            [step for run in bare for step in run.phases],
            service_dtypes=service[0].dtypes,
            bare_dtypes=bare[0].dtypes,
        )
    )
    print("recording by callback event, ms per timed step (service | bare):")
    for event in sorted({event for run in runs for event in run.events}):
        cells = []
        for group in (service, bare):
            seconds = sum(run.events.get(event, [0.0, 0])[0] for run in group)
            cells.append(f"{seconds * 1000 / sum(len(run.phases) for run in group):.2f}")
        print(f"  {event:<16} {cells[0]:>8} | {cells[1]}")


def breakdown(parts: list[Run], bare: list[float], service: list[float]) -> None:
    print("\n== where the time and the differences come from (interleaved, medians) ==")
    kinds = list(dict.fromkeys(run.kind for run in parts))
    base = statistics.median(s for r in parts if r.kind == "bare" for s in r.step_s)
    print(
        f"{'variant':<46} {'s/step':>7} {'vs bare':>8} {'job reads':>9} {'on_step':>8}"
        f" {'|diff| bare':>11} {'|diff| service':>14}"
    )
    for kind in kinds:
        group = [r for r in parts if r.kind == kind]
        per_step = statistics.median(s for r in group for s in r.step_s)
        reads = statistics.median(r.reads_s for r in group)
        on_step = statistics.median(r.on_step_s for r in group)
        to_bare = max(abs(a - b) for a, b in zip(bare, group[0].rewards, strict=True))
        to_service = max(abs(a - b) for a, b in zip(service, group[0].rewards, strict=True))
        print(
            f"{kind:<46} {per_step:>7.4f} {per_step / base - 1:>+8.1%} {reads * 1000:>7.2f}ms"
            f" {on_step * 1000:>6.2f}ms {to_bare:>11.2e} {to_service:>14.2e}"
        )
    print(
        "job reads: should_stop + poll_reward_config per step (each a transaction reading the\n"
        "job row); on_step: time the training thread spends handing the step to the writer."
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--model", choices=("tiny", "13m"), default="tiny")
    parser.add_argument("--generation", choices=("transformers", "vllm"), default="transformers")
    parser.add_argument("--variants", action="store_true", help="also the in-process variants")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    use_one_thread()
    print(f"load average at start: {os.getloadavg()}")
    work = Path(tempfile.mkdtemp(prefix="rft-bench-overhead-"))
    phases_dir = work / "phases"
    stack_env = {
        **THREADS_ENV,
        # The service's rank process times its phases as this process times the bare side's.
        "PYTHONPATH": os.pathsep.join(
            [
                str(BENCH_DIR / "phase_hook"),
                # This checkout's code in every process (an environment's editable install
                # may point at another one).
                str(BENCH_DIR.parent),
                *filter(None, [os.environ.get("PYTHONPATH")]),
            ]
        ),
        PHASES_DIR_ENV: str(phases_dir),
        "RFT_GENERATION_BACKEND": args.generation,
    }
    if args.model == "13m":
        model_dir = build_random_qwen2(work / "roots" / "qwen2-13m", QWEN2_13M)
        stack_env["RFT_MODEL_ROOTS"] = str(work / "roots")
        setup = Setup(str(model_dir), model_dir, transformers_generation())
    else:
        setup = Setup(
            DEMO_BASE_MODEL, ensure_tiny_model(work / "models"), transformers_generation()
        )
    if args.generation == "vllm":
        setup.generation = choose_generation(
            get_settings().model_copy(
                update={"generation_backend": "vllm", "vllm_mode": "colocate"}
            )
        )
    print(f"model {setup.base_model}; generation {setup.generation.describe()}")
    patch_grpo_train(_keep_phases)
    differences = config_differences(args.steps, work, setup)
    print(
        "GRPOConfig of the bare script vs the worker's _grpo_config: "
        + ("identical (reward_weights aside)" if not differences else "; ".join(differences))
    )
    runs: list[Run] = []
    parts: list[Run] = []
    with local_service(work / "stack", stack_env) as http:
        # Warm both sides (imports, the model build, vLLM's compile cache) before anything
        # is timed.
        run_service(http, 2, setup, phases_dir)
        run_bare(2, work, setup)
        for _ in range(args.rounds):
            runs.append(run_bare(args.steps, work, setup))
            runs.append(run_service(http, args.steps, setup, phases_dir))
        # Where the difference goes: the worker's training code in this process, with
        # the sandbox and the database put back one at a time; and the reward weighting.
        for _ in range(args.rounds if args.variants else 0):
            parts.append(run_bare(args.steps, work, setup))
            parts.append(run_bare(args.steps, work, setup, summed=True))
            for sandboxed, database in ((False, False), (True, False), (True, True)):
                parts.append(
                    run_in_process(args.steps, work, setup, sandboxed=sandboxed, database=database)
                )
    summarize(runs)
    if parts:
        breakdown(parts, runs[0].rewards, runs[1].rewards)
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
