"""Agent rollouts per second in the real trainer loop: TRL's tool loop over the sandbox, with a
tool that waits like a remote API, with and without overlapping the calls of different rollouts.

TRL calls the tools of one rollout after another. ``AgentSession`` plans each round instead:
at the round's first call it sends every rollout's calls to the sandbox at once and answers
TRL from the results. The "one at a time" variant turns the planning off (each call is its own
sandbox request, as a stand-in without it would do), everything else the same. Both variants
run GRPO steps of the tiny tool-calling model (64 rollouts a step: 8 prompts x 8) on the
``lookup`` tool made to wait --wait-s first; variants alternate, step times are the median of
steps 2..N (step 1 carries start-up), and rollouts/s is 64 over that.

Run: python bench/bench_agent_rollouts.py [--steps 4] [--wait-s 0.2] [--rounds 2]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kept_steps import KeptSteps  # type: ignore[import-not-found]
from variants import interleaved  # type: ignore[import-not-found]

from sandbox.agent_api import AgentLimits, ToolSpec
from sandbox.agent_host import create_agent_sandbox
from sandbox.api import RewardFunctionSpec
from sandbox.reward_host import create_sandbox
from sandbox.settings import SandboxSettings
from service.base_models.built_in.tiny_tool_model import (
    LOOKUP_REWARD_SOURCE,
    LOOKUP_TOOL_SOURCE,
    TINY_TOOL_MODEL_NAME,
    lookup_dataset,
)
from service.jobs.hyperparameters import PRESETS, Hyperparameters
from workers.training.agents.session import AgentSession
from workers.training.grpo import TrainingSpec, run_grpo
from workers.training.step_records import RewardConfig

ROLLOUTS_PER_STEP = 64


def waiting_lookup(wait_s: float) -> str:
    return LOOKUP_TOOL_SOURCE.replace(
        "    table = {", f"    import time\n\n    time.sleep({wait_s})\n    table = {{", 1
    )


def run(variant: str, steps: int, wait_s: float, cache: Path, out: Path) -> dict[str, float]:
    original = AgentSession._plan_round
    if variant == "one at a time":
        AgentSession._plan_round = lambda self, batch: None  # type: ignore[method-assign]
    try:
        spec = TrainingSpec(
            base_model=TINY_TOOL_MODEL_NAME,
            dataset=lookup_dataset(64, seed=1),
            reward_config=RewardConfig(
                version=1,
                functions=[RewardFunctionSpec("correct_value", LOOKUP_REWARD_SOURCE)],
                tools=[ToolSpec("lookup", waiting_lookup(wait_s))],
            ),
            hyperparameters=Hyperparameters(
                **{
                    **PRESETS["tiny-cpu"],
                    "num_generations": 8,
                    "prompts_per_step": ROLLOUTS_PER_STEP // 8,
                    "max_completion_length": 64,
                    "max_turns": 2,
                    "learning_rate": 3e-3,
                    "train_steps": steps,
                    "checkpoint_every": 1000,
                    "seed": 0,
                }
            ),
            output_dir=out,
            model_cache_dir=cache,
        )
        observer = KeptSteps()
        sandbox = create_sandbox(SandboxSettings(isolation="none"))
        agents = create_agent_sandbox(SandboxSettings(isolation="none"), AgentLimits())
        try:
            run_grpo(spec, sandbox, observer, agents)
        finally:
            agents.close()
            sandbox.close()
    finally:
        AgentSession._plan_round = original  # type: ignore[method-assign]
    later = observer.records[1:]
    step_s = statistics.median(record.duration_s for record in later)
    calls = statistics.mean(
        (record.agent_metrics or {}).get("tool_calls_per_rollout", 0.0) for record in later
    )
    return {"step_s": step_s, "calls_per_rollout": calls}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--wait-s", type=float, default=0.2)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    variants = ["planned rounds", "one at a time"]
    results: dict[str, list[dict[str, float]]] = {variant: [] for variant in variants}
    with tempfile.TemporaryDirectory() as scratch:
        cache = Path(scratch) / "models"
        for round_index, variant in interleaved(variants, args.rounds):
            out = Path(scratch) / f"{variant.replace(' ', '-')}-{round_index}"
            started = time.perf_counter()
            result = run(variant, args.steps, args.wait_s, cache, out)
            results[variant].append(result)
            print(
                f"round {round_index + 1} {variant:>15}: step {result['step_s']:.2f} s, "
                f"{result['calls_per_rollout']:.2f} tool calls/rollout "
                f"({time.perf_counter() - started:.0f} s in all)",
                flush=True,
            )
    summary = {}
    for variant in variants:
        step_s = statistics.median(r["step_s"] for r in results[variant])
        calls = statistics.mean(r["calls_per_rollout"] for r in results[variant])
        summary[variant] = step_s
        print(
            f"{variant:>15}: {ROLLOUTS_PER_STEP / step_s:6.1f} rollouts/s "
            f"(step {step_s:.2f} s, {calls:.2f} calls/rollout waiting {args.wait_s} s each)"
        )
    ratio = summary["one at a time"] / summary["planned rounds"]
    print(f"ratio (one at a time / planned): {ratio:.1f}x")


if __name__ == "__main__":
    main()
