"""Writes GSM8K's train and test splits as rft datasets (JSONL): a chat prompt asking for the
<reasoning>/<answer> format, and the reference answer as its own column.

    pip install datasets && python examples/gsm8k/prepare_data.py   # needs the model hub

Writes gsm8k_train.jsonl (7473 rows) and gsm8k_test.jsonl (1319 rows) in the current folder.
"""

from __future__ import annotations

import json

SYSTEM_PROMPT = (
    "Respond in the following format:\n<reasoning>\n...\n</reasoning>\n<answer>\n...\n</answer>"
)


def row(example: dict[str, str]) -> dict[str, object]:
    return {
        "prompt": [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": example["question"]},
        ],
        # GSM8K's solutions end with "#### <number>".
        "answer": example["answer"].split("####")[-1].strip().replace(",", ""),
    }


def main() -> None:
    from datasets import load_dataset

    for split in ("train", "test"):
        rows = load_dataset("openai/gsm8k", "main", split=split)
        with open(f"gsm8k_{split}.jsonl", "w") as file:
            for example in rows:
                file.write(json.dumps(row(example)) + "\n")
        print(f"gsm8k_{split}.jsonl: {len(rows)} rows")


if __name__ == "__main__":
    main()
