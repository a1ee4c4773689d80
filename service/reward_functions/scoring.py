"""Running user reward code from the API (tests, pre-flight checks, dry runs) and the workers,
always through the sandbox, with one mapping from our settings to its limits."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sandbox.api import FunctionResult, RewardFunctionSpec, ScoringBatch
from sandbox.process import ProcessSandbox
from sandbox.settings import Isolation, SandboxSettings
from service.settings import Settings, get_settings


def sandbox_settings(
    settings: Settings, *, allow_network: bool, secrets: dict[str, str]
) -> SandboxSettings:
    isolation: Isolation = "none" if settings.sandbox_isolation == "none" else "bwrap"
    return SandboxSettings(
        isolation=isolation,
        # Without namespaces there is no network to withhold: the flag only means something
        # under bwrap.
        allow_network=allow_network and isolation == "bwrap",
        env=dict(secrets),
        memory_limit_mb=settings.reward_memory_limit_mb,
        call_timeout_s=settings.reward_call_timeout_s,
        load_timeout_s=settings.reward_load_timeout_s,
        sample_timeout_s=settings.reward_sample_timeout_s,
        uid_range_first=settings.sandbox_uid_first,
        uid_range_count=settings.sandbox_uid_count,
        uid_lock_dir=settings.sandbox_uid_lock_dir,
        cgroups=settings.sandbox_cgroups,
        cgroup_pids_max=settings.sandbox_pids_max,
    )


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
