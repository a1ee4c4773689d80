"""The built-in tiny model's hyperparameters, set explicitly by every test job that trains.

The service's defaults are for real models (small learning rate, long completions); the tiny
model needs its own values to learn within a few CPU steps (see /work/shared/FACTS.md).
Spread into a job's hyperparameters: ``{**TINY_HYPERPARAMETERS, "train_steps": 4}``.
"""

from __future__ import annotations

from typing import Any

TINY_HYPERPARAMETERS: dict[str, Any] = {
    "learning_rate": 2e-2,
    "num_generations": 8,
    "prompts_per_step": 2,
    "max_completion_length": 16,
    "temperature": 1.0,
    "top_p": 1.0,
    "beta": 0.0,
    "loss_type": "dapo",
    "lr_scheduler_type": "constant",
    "warmup_ratio": 0.0,
    "epsilon": 0.2,
    "epsilon_high": 0.2,
}
