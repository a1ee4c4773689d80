"""Inputs shared by the SDK tests."""

from typing import Any

from rft.resources.jobs import _create_request
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

# Chat prompts with a system message (the CLI shows them as lines of text).
CHAT_ROWS = [
    {
        "prompt": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": f"Say {w}"},
        ]
    }
    for w in "abcd"
]

SHOUT_SOURCE = "def shout(prompt, completion, example):\n    return float(completion.isupper())\n"


def create_request_body(**fields: Any) -> dict[str, Any]:
    """The body ``jobs.create`` sends for a plain job plus ``fields`` (its keyword arguments)."""
    arguments: dict[str, Any] = {
        "dataset": "ds_x",
        "reward_functions": {"shout": SHOUT_SOURCE},
        "reward_module": None,
        "base_model": "rft-tiny",
        "hyperparameters": None,
        "name": None,
        "allow_network": False,
        "runtime_packages": (),
        "secrets": None,
        "idempotency_key": "key",
    }
    options = _create_request(**{**arguments, **fields})
    assert options.json is not None
    return dict(options.json)
