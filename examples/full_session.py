"""A whole session with the rft SDK: upload, train, change a reward mid-run, inspect results.

Run it against a running server (for example `rft-server up`):

    RFT_BASE_URL=http://127.0.0.1:8000 RFT_API_KEY=rft_... python examples/full_session.py

It trains the built-in tiny model ("rft-tiny"), which takes a minute or two on a CPU.
"""

from __future__ import annotations

import rft

TOPICS = ["cats", "the sea", "apples", "rain", "music", "mountains", "bread", "trains"]
TRAIN_STEPS = 40
UPDATE_AFTER_STEP = 3


# Reward functions are plain functions: the SDK sends their source to the server's sandbox, so
# they may use only their arguments, builtins and what they import inside their body.
def letter_a(prompt, completion, example):
    """The share of the completion's characters that are the letter a."""
    if not completion:
        return 0.0
    return completion.count("a") / len(completion)


def brevity(prompt, completion, example):
    """1.0 for an empty completion, falling to 0.0 at 32 characters."""
    return max(0.0, 1.0 - len(completion) / 32)


def letter_a_or_e(prompt, completion, example):
    """The replacement mid-run: reward the letters a and e."""
    if not completion:
        return 0.0
    return sum(ch in "ae" for ch in completion) / len(completion)


def main() -> None:
    # api_key and base_url come from RFT_API_KEY and RFT_BASE_URL.
    with rft.Client() as client:
        dataset = client.datasets.upload(
            [{"prompt": f"Write about {topic}:", "topic": topic} for topic in TOPICS],
            name="full session example",
        )
        print(f"uploaded {dataset.id}: {dataset.row_count} rows")

        job = client.jobs.create(
            dataset=dataset,
            reward_functions={
                "letter_a": letter_a,
                "brevity": rft.RewardFunction(brevity, weight=0.2),
            },
            base_model="rft-tiny",
            # The defaults are for real models; the built-in tiny model has a preset of its own.
            hyperparameters=rft.Hyperparameters(
                preset="tiny-cpu",
                train_steps=TRAIN_STEPS,
                num_generations=4,
                max_completion_length=12,
            ),
            name="full session example",
        )
        print(f"created {job.id}")

        job = client.jobs.wait(job.id, until_step=UPDATE_AFTER_STEP, poll_interval=0.3, timeout=600)
        print(f"{job.steps_completed} steps recorded; updating the config")

        config = client.jobs.get_config(job.id)
        config.reward_functions["letter_a"] = letter_a_or_e  # new code, same weight
        config.reward_functions["brevity"].weight = 0.5
        preview = client.jobs.update_config(job.id, config, dry_run=True)
        print(
            f"dry run on step {preview.step}: "
            f"{preview.advantage_sign_changes} advantages would change sign"
        )
        update = client.jobs.update_config(job.id, config)  # If-Match: the version read above
        print(f"config v{update.version} applies from step {update.applies_from_step}")

        job = client.jobs.wait(job.id, progress=True, timeout=900)
        print(f"job {job.status.value}" + (f": {job.failure_reason}" if job.failure_reason else ""))

        print(f"\n{'step':>4}  {'config':>6}  {'reward':>7}  {'std':>6}  per function")
        steps = client.jobs.steps(job.id)
        for step in steps:
            functions = "  ".join(
                f"{name}={metrics.mean:.3f}" if metrics.mean is not None else f"{name}=-"
                for name, metrics in sorted(step.reward_functions.items())
            )
            reward = "-" if step.reward_mean is None else f"{step.reward_mean:.3f}"
            spread = "-" if step.reward_std is None else f"{step.reward_std:.3f}"
            version = f"v{step.config_version}"
            print(f"{step.step:>4}  {version:>6}  {reward:>7}  {spread:>6}  {functions}")

        if not steps:
            return
        last = steps[-1].step
        completions = sorted(
            client.jobs.completions(job.id, step=last),
            key=lambda completion: completion.total if completion.total is not None else -1e9,
        )
        print(f"\nbest and worst completions of step {last}:")
        for label, completion in (("best ", completions[-1]), ("worst", completions[0])):
            print(f"  {label} total={completion.total}  {completion.completion!r}")


if __name__ == "__main__":
    main()
