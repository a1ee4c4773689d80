"""The built-in tiny model's hyperparameters, set explicitly by every test job that trains.

The service's defaults are for real models (small learning rate, long completions); the tiny
model needs its own values to learn within a few CPU steps (docs/measured-facts.md). They
are the `tiny-cpu` preset's values, spelled out in each request rather than named, so a test
job says exactly what it trains with.
Spread into a job's hyperparameters: ``{**TINY_HYPERPARAMETERS, "train_steps": 4}``.
"""

from __future__ import annotations

from typing import Any

from service.jobs.hyperparameters import PRESETS

TINY_HYPERPARAMETERS: dict[str, Any] = dict(PRESETS["tiny-cpu"])
