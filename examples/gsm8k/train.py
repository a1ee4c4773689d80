"""GSM8K in two stages on a real model (docs/get-started/gsm8k.md): first the format, then the
answers, the second job starting from the first one's adapter. Needs a GPU worker.

    python examples/gsm8k/prepare_data.py
    RFT_BASE_URL=http://127.0.0.1:8000 RFT_API_KEY=rft_... python examples/gsm8k/train.py
"""

from __future__ import annotations

from pathlib import Path

import rft

BASE_MODEL = "Qwen/Qwen2.5-0.5B-Instruct"
REWARDS = Path(__file__).with_name("rewards.py")
# Chat prompts of a few hundred tokens: capping them sizes vLLM's KV cache (GPU sizing).
# Stage 1 learns the format; stage 2 weights the right answer most.
FORMAT_REWARDS = ["strict_format_reward_func", "xmlcount_reward_func"]
ANSWER_REWARDS = {
    "correctness_reward_func": 2.0,
    "int_reward_func": 0.5,
    "strict_format_reward_func": 0.5,
}
COMMON = {"max_prompt_length": 256, "max_completion_length": 256, "eval_every": 25}


def main() -> None:
    client = rft.Client()  # RFT_API_KEY and RFT_BASE_URL from the environment
    train = client.datasets.upload("gsm8k_train.jsonl")
    test = client.datasets.upload("gsm8k_test.jsonl")

    stage1 = client.jobs.create(
        dataset=train,
        validation_dataset=test,
        base_model=BASE_MODEL,
        reward_module=rft.RewardModule(REWARDS, FORMAT_REWARDS),
        hyperparameters={"train_steps": 100, **COMMON},
    )
    print("stage 1:", stage1.id)
    stage1 = client.jobs.wait(stage1.id, progress=True)
    if stage1.status != "succeeded":
        raise SystemExit(f"stage 1 ended {stage1.status}: {stage1.failure_reason}")

    stage2 = client.jobs.create(
        dataset=train,
        validation_dataset=test,
        init_from=stage1,  # its final adapter, and its base model
        reward_module=rft.RewardModule(REWARDS, ANSWER_REWARDS),
        hyperparameters={"train_steps": 300, **COMMON},
    )
    print("stage 2:", stage2.id, "from", stage2.init_from)
    stage2 = client.jobs.wait(stage2.id, progress=True)
    for evaluation in client.jobs.evals(stage2.id):
        print(evaluation.step, evaluation.reward_mean)


if __name__ == "__main__":
    main()
