"""A bundled demo: a dataset and reward functions that the built-in tiny model learns in ~20 steps.

Used by the quick-start, the integration tests and anyone trying the service without a model hub.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from sandbox.api import RewardFunctionSpec

DEMO_BASE_MODEL = "rft-tiny"
# The tiny model's own settings (the service's defaults are for real models): its preset's
# large learning rate, constant schedule and short completions make it learn within ~20 CPU
# steps (see service/jobs/hyperparameters.py).
DEMO_HYPERPARAMETERS: dict[str, Any] = {"preset": "tiny-cpu", "seed": 0}


def demo_dataset() -> list[dict[str, Any]]:
    """64 short prompts, each with the letter its completion is rewarded for ("a")."""
    text = resources.files(__package__).joinpath("dataset.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def demo_rewards_source() -> str:
    return resources.files(__package__).joinpath("rewards.py").read_text(encoding="utf-8")


def demo_reward_functions() -> list[RewardFunctionSpec]:
    """letter_fraction drives training; brevity shows a second function's metrics.

    brevity's weight is tiny on purpose: on the tiny model completion length varies far more
    than the letter fraction, and at weight 0.1 it halves the letter fraction's rise in 20 steps.
    """
    source = demo_rewards_source()
    return [
        RewardFunctionSpec(name="letter_fraction", source=source, weight=1.0),
        RewardFunctionSpec(name="brevity", source=source, weight=0.02),
    ]
