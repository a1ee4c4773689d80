"""Inputs shared by the SDK tests."""

from typing import Any

from tests.tiny import TINY_HYPERPARAMETERS

# Jobs that train: the tiny model's settings, fewer samples, so the one test worker gets
# through them quickly.
QUICK_HYPERPARAMETERS: dict[str, Any] = {
    **TINY_HYPERPARAMETERS,
    "train_steps": 2,
    "num_generations": 4,
    "prompts_per_step": 2,
    "max_completion_length": 8,
}

SHOUT_SOURCE = "def shout(prompt, completion, example):\n    return float(completion.isupper())\n"
