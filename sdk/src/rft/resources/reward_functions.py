from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rft.models import (
    Dataset,
    RewardFunctionsInput,
    RewardFunctionTestResult,
    RewardModule,
    reward_functions_request,
)
from rft.transport import AsyncTransport, RequestOptions, SyncTransport


def _test_request(
    reward_functions: RewardFunctionsInput | None,
    reward_module: RewardModule | None,
    samples: Sequence[Mapping[str, Any]] | None,
    dataset: str | Dataset | None,
    completions: Sequence[str] | None,
    rows: int | None,
    allow_network: bool,
    secrets: Mapping[str, str] | None,
    runtime_packages: Sequence[str] | None,
) -> RequestOptions:
    body: dict[str, Any] = {
        "reward_functions": reward_functions_request(reward_functions or {}),
        "allow_network": allow_network,
        "secrets": dict(secrets or {}),
    }
    if runtime_packages:
        body["runtime_packages"] = list(runtime_packages)
    if reward_module is not None:
        body["reward_module"] = reward_module.to_request()
    if samples is not None:
        body["samples"] = [dict(sample) for sample in samples]
    if dataset is not None:
        body["dataset_id"] = dataset.id if isinstance(dataset, Dataset) else dataset
    if completions is not None:
        body["completions"] = list(completions)
    if rows is not None:
        body["rows"] = rows
    return RequestOptions("POST", "/v1/reward-functions/test", json=body)


class RewardFunctions:
    def __init__(self, transport: SyncTransport) -> None:
        self._transport = transport

    def test(
        self,
        *,
        reward_functions: RewardFunctionsInput | None = None,
        reward_module: RewardModule | None = None,
        samples: Sequence[Mapping[str, Any]] | None = None,
        dataset: str | Dataset | None = None,
        completions: Sequence[str] | None = None,
        rows: int | None = None,
        allow_network: bool = False,
        secrets: Mapping[str, str] | None = None,
        runtime_packages: Sequence[str] | None = None,
    ) -> RewardFunctionTestResult:
        """Run reward functions in the server's sandbox, without a job.

        Either on ``samples`` (``{"prompt", "completion", "example"}``), or on the first
        ``rows`` rows of ``dataset`` paired with ``completions``. Returns per function the
        scores, typed errors, printed output and timing. ``runtime_packages`` (pip
        requirements, as a job takes them) are installed for the sandbox first: a reward that
        runs ``python -m pytest`` needs ``["pytest"]``.
        """
        options = _test_request(
            reward_functions,
            reward_module,
            samples,
            dataset,
            completions,
            rows,
            allow_network,
            secrets,
            runtime_packages,
        )
        return RewardFunctionTestResult.model_validate(self._transport.request(options).json())


class AsyncRewardFunctions:
    def __init__(self, transport: AsyncTransport) -> None:
        self._transport = transport

    async def test(
        self,
        *,
        reward_functions: RewardFunctionsInput | None = None,
        reward_module: RewardModule | None = None,
        samples: Sequence[Mapping[str, Any]] | None = None,
        dataset: str | Dataset | None = None,
        completions: Sequence[str] | None = None,
        rows: int | None = None,
        allow_network: bool = False,
        secrets: Mapping[str, str] | None = None,
        runtime_packages: Sequence[str] | None = None,
    ) -> RewardFunctionTestResult:
        options = _test_request(
            reward_functions,
            reward_module,
            samples,
            dataset,
            completions,
            rows,
            allow_network,
            secrets,
            runtime_packages,
        )
        response = await self._transport.request(options)
        return RewardFunctionTestResult.model_validate(response.json())
