"""A job's tools and environments are loaded in the agent sandbox before they are stored (at
creation and at each config update): code that cannot load is a 400 naming it, instead of a
job that fails on its worker."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sandbox.agent_api import (
    DEFAULT_TOOL_TIMEOUT_S,
    AgentCodeError,
    AgentLimits,
    EnvironmentSpec,
    LoadedAgentCode,
    ToolSpec,
)
from sandbox.agent_host import create_agent_sandbox
from sandbox.child.agent_code_rules import AgentCodeProblem, check_loaded_code
from service.agent_code.schemas import EnvironmentCreate
from service.errors import InvalidAgentCode
from service.reward_functions.scoring import api_runtime_packages
from service.server_paths import hide_server_paths
from service.settings import get_settings, sandbox_settings


def agent_code_specs(
    tools: Mapping[str, str], environments: Mapping[str, EnvironmentCreate]
) -> tuple[list[ToolSpec], list[EnvironmentSpec]]:
    """Specs of tools (name -> source) and environments as a request gives them; their
    versions are assigned when they are stored."""
    return (
        [ToolSpec(name=name, source=source) for name, source in tools.items()],
        [
            EnvironmentSpec(
                name=name,
                source=environment.source,
                class_name=environment.class_name,
                weight=environment.weight,
            )
            for name, environment in environments.items()
        ],
    )


def tool_timeout(hyperparameters: Mapping[str, Any]) -> float:
    """The job's limit on one tool call (jobs stored before agent jobs have none)."""
    return float(hyperparameters.get("tool_timeout_s") or DEFAULT_TOOL_TIMEOUT_S)


def load_agent_code(
    tools: Sequence[ToolSpec],
    environments: Sequence[EnvironmentSpec],
    *,
    allow_network: bool,
    secrets: dict[str, str],
    runtime_packages: Sequence[str],
    tool_timeout_s: float,
) -> LoadedAgentCode:
    """Load the code in a fresh agent sandbox, as a job's ranks will, then stop it.

    Raises InvalidAgentCode (400) naming the tool or environment that cannot load, or a tool
    whose name an environment's method also has; RuntimePackagesFailed (400) when the job's
    packages, which the code may import, cannot be installed.
    """
    if not tools and not environments:
        return LoadedAgentCode(tools=(), environments={})
    settings = get_settings()
    config = sandbox_settings(settings, allow_network=allow_network, secrets=secrets)
    if runtime_packages:
        # Tool code may import the job's packages: load it where they are installed.
        config.extra_python_paths = [api_runtime_packages(runtime_packages, settings)]
    sandbox = create_agent_sandbox(config, AgentLimits(tool_timeout_s=tool_timeout_s))
    try:
        loaded = sandbox.load(tools, environments)
        # The rules the worker loads this code by (sandbox.child.agent_code_rules): refused here,
        # it never becomes a job that fails on its worker.
        check_loaded_code(loaded)
    except (AgentCodeError, AgentCodeProblem) as error:
        raise InvalidAgentCode(
            f"{_what(error.name, tools, environments)}: "
            f"{hide_server_paths(error.message, settings)}"
        ) from None
    finally:
        sandbox.close()
    _check_unique_tool_names(loaded)
    return loaded


def _what(name: str, tools: Sequence[ToolSpec], environments: Sequence[EnvironmentSpec]) -> str:
    """How an error names what failed: a tool, an environment, or (a failure of the whole
    load) every piece."""
    if name in {tool.name for tool in tools}:
        return f"tool {name!r}"
    if name in {environment.name for environment in environments}:
        return f"environment {name!r}"
    return f"tools and environments ({name})"


def _check_unique_tool_names(loaded: LoadedAgentCode) -> None:
    """The model calls tools by name: a standalone tool and an environment's method must not
    share one (methods of different environments may: a rollout uses one environment)."""
    standalone = {tool.name for tool in loaded.tools}
    for environment in loaded.environments.values():
        shared = sorted(standalone & {method.name for method in environment.methods})
        if shared:
            raise InvalidAgentCode(
                f"tool {shared[0]!r} is also a method of environment {environment.name!r}: "
                "the model calls tools by name; rename one of them"
            )


def require_scores(loaded: LoadedAgentCode, reward_functions: int) -> None:
    """A job without reward functions is scored by its environments' get_reward alone: every
    environment needs one, or its rollouts would get no score at all."""
    if reward_functions:
        return
    unscored = sorted(name for name, env in loaded.environments.items() if not env.has_reward)
    if unscored:
        raise InvalidAgentCode(
            f"environment {unscored[0]!r} has no get_reward() and the job has no reward "
            "function: its rollouts would get no score. Add get_reward or a reward function."
        )
