"""Running user reward code from the API (tests, pre-flight checks, dry runs) and the workers,
always through the sandbox, with one mapping from our settings to its limits."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sandbox.api import FunctionResult, RewardFunctionSpec, ScoringBatch
from sandbox.process import ProcessSandbox
from service.settings import Settings, get_settings, sandbox_settings


def score_once(
    functions: Sequence[RewardFunctionSpec],
    prompts: list[Any],
    completions: list[str],
    examples: list[dict[str, Any]],
    *,
    allow_network: bool = False,
    secrets: dict[str, str] | None = None,
    settings: Settings | None = None,
) -> dict[str, FunctionResult]:
    """Load ``functions`` into a fresh sandbox, score one batch, stop the sandbox.

    Raises RewardCodeError when a function cannot load.
    """
    config = sandbox_settings(
        settings or get_settings(), allow_network=allow_network, secrets=secrets or {}
    )
    with ProcessSandbox(config) as sandbox:
        sandbox.load(functions)
        return sandbox.score(
            ScoringBatch(prompts=prompts, completions=completions, examples=examples)
        )
