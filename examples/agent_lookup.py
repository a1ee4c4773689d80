"""An agent job with the rft SDK: the model learns to call a tool, and you read what it did.

Run it against a running server (for example `bash scripts/run.sh --keep-running`):

    RFT_BASE_URL=http://127.0.0.1:8000 RFT_API_KEY=rft_... python examples/agent_lookup.py

It trains the built-in tool-calling tiny model ("rft-tiny-tools": the tiny model warmed up on
transcripts of this very task, so it calls `lookup` on ~40% of its first turns and guesses the
rest) with GRPO: the reward pays for the right value, which only the tool knows, so the share of
rollouts that call it rises. About a minute on a CPU. `--steps N` trains N steps instead of 16.
"""

from __future__ import annotations

import argparse
import random

import rft

TRAIN_STEPS = 16
KEYS = ["alpha", "beta", "gamma", "delta", "kappa", "sigma", "omega", "theta", "lambda", "iota"]
QUESTIONS = ["What is the value of {key}?", "Look up {key}.", "Tell me the value of {key}."]


# The tool: the model sees its name, type hints and docstring (the schema the chat template
# renders). It runs in the job's sandbox, so like a reward function it is self-contained.
def lookup(key: str) -> str:
    """Look up the value stored under a key.

    Args:
        key: The key to look up.
    """
    table = {
        "alpha": "apple",
        "beta": "cat",
        "gamma": "plum",
        "delta": "owl",
        "kappa": "fig",
        "sigma": "bee",
        "omega": "moon",
        "theta": "rain",
        "lambda": "snow",
        "iota": "star",
        "zeta": "lime",
        "rho": "wolf",
    }
    return table.get(key, "no value is stored under " + repr(key))


def correct_value(prompt, completion, example):
    """1.0 when the final answer names the key's value: `completion` is the last assistant
    turn of the rollout (the whole conversation is in the completion's trajectory)."""
    import re

    return 1.0 if re.search(r"\b" + re.escape(example["answer"]) + r"\b", completion) else 0.0


def main(train_steps: int = TRAIN_STEPS) -> None:
    # What both agent examples print at the end: examples/agent_report.py, beside this file.
    from agent_report import print_last_rollout, print_reward_trend

    rng = random.Random(1)
    rows = []
    for _ in range(64):
        key = rng.choice(KEYS)
        question = rng.choice(QUESTIONS).format(key=key)
        rows.append(
            {
                "prompt": [{"role": "user", "content": question}],
                "key": key,
                "answer": lookup(key),
            }
        )
    with rft.Client() as client:  # api_key and base_url come from RFT_API_KEY and RFT_BASE_URL
        dataset = client.datasets.upload(rows, name="lookup questions")
        job = client.jobs.create(
            dataset=dataset,
            base_model="rft-tiny-tools",
            reward_functions={"correct_value": correct_value},
            tools=[lookup],
            hyperparameters=rft.Hyperparameters(
                preset="tiny-cpu",
                train_steps=train_steps,
                num_generations=8,
                prompts_per_step=4,
                max_completion_length=64,  # a call, the tool's answer and the final answer
                max_turns=2,
                learning_rate=3e-3,
                seed=0,
            ),
        )
        print(f"created {job.id}")
        job = client.jobs.wait(job.id)
        print(f"{job.id}: {job.status}")
        steps = list(client.jobs.steps(job.id))
        for step in steps:
            metrics = step.agent_metrics
            calls = metrics.tool_calls_per_rollout if metrics is not None else 0.0
            reward = step.reward_mean or 0.0
            print(f"step {step.step:2d}  reward {reward:.2f}  tool calls/rollout {calls:.2f}")
        print_reward_trend(steps)
        print_last_rollout(client, job.id, steps)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=TRAIN_STEPS, help="training steps")
    main(parser.parse_args().steps)
