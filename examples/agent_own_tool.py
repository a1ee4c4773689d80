"""Teach a small model to use *your* tool: a supervised warm-up on transcripts of the tool, then
a GRPO agent job that starts from it, with the rft SDK.

Run it against a running server (for example `bash scripts/run.sh --keep-running`):

    RFT_BASE_URL=http://127.0.0.1:8000 RFT_API_KEY=rft_... python examples/agent_own_tool.py

A small model has never seen your tool: it does not know its name, its argument, or that its
answer should come from the tool's result. So first (1) an SFT job on a few dozen transcripts of
the tool in use (the question, the call, the tool's result, an answer quoting it), then (2) a
GRPO agent job `init_from` that SFT job, where the tool really runs (in the job's sandbox) and
the reward pays for an answer that names the tool's result. It uses the built-in tiny model
("rft-tiny-tools"), a few minutes on a CPU; with your own model, change `BASE_MODEL`.
`--sft-steps N` and `--steps N` change the two jobs' lengths.
"""

from __future__ import annotations

import argparse
import random
import re
import statistics

import rft

BASE_MODEL = "rft-tiny-tools"
SFT_STEPS = 32
TRAIN_STEPS = 16
REGISTERS = ["alpha", "beta", "gamma", "delta", "kappa", "sigma", "omega", "theta", "eta", "mu"]
QUESTIONS = ["What is the value of {name}?", "Look up {name}.", "Tell me the value of {name}."]


# The tool: the model sees its name, type hints and docstring (the schema the chat template
# renders). It runs in the job's sandbox, so like a reward function it is self-contained.
def get_word(name: str) -> str:
    """Read the word a register holds.

    Args:
        name: The register to read.
    """
    registers = {
        "alpha": "oak",
        "beta": "frog",
        "gamma": "sun",
        "delta": "milk",
        "kappa": "gold",
        "sigma": "tea",
        "omega": "leaf",
        "theta": "salt",
        "eta": "wind",
        "mu": "corn",
    }
    return registers.get(name, "no register called " + repr(name))


# The same tool as the chat template shows it to the model (OpenAI's and TRL's tool format):
# an SFT row's `tools`, so the transcripts render exactly as the agent job's rollouts will.
GET_WORD_SCHEMA = {
    "type": "function",
    "function": {
        "name": "get_word",
        "description": "Read the word a register holds.",
        "parameters": {
            "type": "object",
            "properties": {"name": {"type": "string", "description": "The register to read."}},
            "required": ["name"],
        },
        "return": {"type": "string"},
    },
}


def answer(name: str, word: str) -> str:
    return f"The value of {name} is {word}."


def question(rng: random.Random, name: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": rng.choice(QUESTIONS).format(name=name)}]


def transcript(rng: random.Random, name: str) -> dict[str, object]:
    """One SFT row: the question, then the assistant's turns (the call, the tool's result, the
    answer quoting it). The loss is on the completion."""
    word = get_word(name)
    call = {"type": "function", "function": {"name": "get_word", "arguments": {"name": name}}}
    return {
        "prompt": question(rng, name),
        "completion": [
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "name": "get_word", "content": word},
            {"role": "assistant", "content": answer(name, word)},
        ],
        "tools": [GET_WORD_SCHEMA],
    }


def correct_word(prompt, completion, example):
    """1.0 when the final answer names the word the register holds, else 0.0."""
    import re

    return 1.0 if re.search(r"\b" + re.escape(example["answer"]) + r"\b", completion) else 0.0


def answered_from_the_tool(trajectory: list[rft.TrajectoryMessage]) -> bool:
    """Whether the rollout's final answer names what its last successful tool call returned."""
    results = [m.content for m in trajectory if isinstance(m, rft.ToolMessage) and not m.error]
    finals = [m.content for m in trajectory if isinstance(m, rft.AssistantMessage)]
    if not results or not finals or not results[-1]:
        return False
    return re.search(r"\b" + re.escape(str(results[-1])) + r"\b", finals[-1] or "") is not None


def main(sft_steps: int = SFT_STEPS, train_steps: int = TRAIN_STEPS) -> None:
    # What both agent examples print at the end: examples/agent_report.py, beside this file.
    from agent_report import print_last_rollout, print_reward_trend

    rng = random.Random(1)
    transcripts = [transcript(rng, rng.choice(REGISTERS)) for _ in range(64)]
    questions = []
    for _ in range(64):
        name = rng.choice(REGISTERS)
        questions.append({"prompt": question(rng, name), "name": name, "answer": get_word(name)})

    with rft.Client() as client:  # api_key and base_url come from RFT_API_KEY and RFT_BASE_URL
        # 1. The warm-up: supervised, on transcripts of the tool in use.
        sft = client.jobs.create(
            dataset=client.datasets.upload(transcripts, name="get_word transcripts"),
            base_model=BASE_MODEL,
            method="sft",
            hyperparameters=rft.Hyperparameters(
                train_steps=sft_steps, batch_size=8, learning_rate=4e-3, seed=0
            ),
        )
        sft = client.jobs.wait(sft.id)
        losses = [s.loss for s in client.jobs.steps(sft.id) if s.loss is not None]
        print(f"{sft.id} (sft): {sft.status}, loss {losses[0]:.2f} -> {losses[-1]:.2f}")

        # 2. The agent job, from the warm-up's adapter: the tool runs, the reward pays for the
        # word it returned.
        job = client.jobs.create(
            dataset=client.datasets.upload(questions, name="register questions"),
            init_from=sft,
            reward_functions={"correct_word": correct_word},
            tools=[get_word],
            hyperparameters=rft.Hyperparameters(
                preset="tiny-cpu",
                train_steps=train_steps,
                num_generations=8,
                prompts_per_step=4,
                max_completion_length=64,  # a call, the tool's answer and the final answer
                max_turns=2,
                # Sampled cooler than the preset's 1.0: the tiny model spells the tool's name
                # letter by letter, and at 1.0 a third of its calls came out misspelled.
                temperature=0.7,
                # A fresh optimizer's first steps move every weight by about the learning
                # rate: warmed up, they do not knock out what the SFT taught.
                learning_rate=3e-3,
                lr_scheduler_type="constant_with_warmup",
                warmup_ratio=0.25,
                seed=0,
            ),
        )
        print(f"created {job.id} (grpo, init_from {sft.id})")
        job = client.jobs.wait(job.id)
        print(f"{job.id}: {job.status}")
        steps = list(client.jobs.steps(job.id))
        from_tool = []
        for step in steps:
            rollouts = [c.trajectory or [] for c in client.jobs.completions(job.id, step=step.step)]
            share = statistics.mean(answered_from_the_tool(t) for t in rollouts) if rollouts else 0
            from_tool.append(share)
            reward = step.reward_mean or 0.0
            print(f"step {step.step:2d}  reward {reward:.2f}  answers from the tool {share:.2f}")
        quarter = print_reward_trend(steps)
        tool_share = statistics.mean(from_tool[-quarter:])
        print(f"answers equal to the tool's result, last {quarter} steps: {tool_share:.2f}")
        print_last_rollout(client, job.id, steps)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sft-steps", type=int, default=SFT_STEPS, help="SFT warm-up steps")
    parser.add_argument("--steps", type=int, default=TRAIN_STEPS, help="GRPO training steps")
    arguments = parser.parse_args()
    main(arguments.sft_steps, arguments.steps)
