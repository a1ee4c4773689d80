"""Runs untrusted reward-function code away from the worker process.

The training loop talks only to :class:`sandbox.api.RewardSandbox`; how the code is isolated
(processes, namespaces, limits) is this package's business. Start one with
``create_sandbox(SandboxSettings(...))``.
"""

from sandbox.api import (
    FunctionResult,
    RewardCodeError,
    RewardError,
    RewardErrorKind,
    RewardForm,
    RewardFunctionSpec,
    RewardSandbox,
    ScoringBatch,
)
from sandbox.inspection import RewardEntryPoint, find_reward_entry_point, inspect_reward_source
from sandbox.isolation import IsolationCheck, SandboxUnavailableError, detect_isolation
from sandbox.reward_host import ProcessSandbox, create_sandbox
from sandbox.settings import SandboxSettings

__all__ = [
    "FunctionResult",
    "IsolationCheck",
    "ProcessSandbox",
    "RewardCodeError",
    "RewardEntryPoint",
    "RewardError",
    "RewardErrorKind",
    "RewardForm",
    "RewardFunctionSpec",
    "RewardSandbox",
    "SandboxSettings",
    "SandboxUnavailableError",
    "ScoringBatch",
    "create_sandbox",
    "detect_isolation",
    "find_reward_entry_point",
    "inspect_reward_source",
]
