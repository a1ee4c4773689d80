from __future__ import annotations

import asyncio
import builtins
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any, Literal, overload

import httpx

from rft.models import (
    Completion,
    ConfigUpdate,
    Dataset,
    DryRunResult,
    Hyperparameters,
    Job,
    JobConfig,
    JobEvent,
    Page,
    RewardError,
    RewardFunctionLog,
    RewardFunctionsInput,
    Step,
    reward_functions_request,
)
from rft.pagination import AsyncPageIterator, PageIterator
from rft.progress import JobProgress, job_progress
from rft.transport import AsyncTransport, RequestOptions, SyncTransport, new_idempotency_key

DEFAULT_BASE_MODEL = "rft-tiny"
DEFAULT_POLL_INTERVAL_S = 1.0


def _create_request(
    *,
    dataset: str | Dataset,
    reward_functions: RewardFunctionsInput,
    base_model: str,
    hyperparameters: Hyperparameters | Mapping[str, Any] | None,
    name: str | None,
    allow_network: bool,
    runtime_packages: Sequence[str],
    idempotency_key: str | None,
) -> RequestOptions:
    if isinstance(hyperparameters, Hyperparameters):
        # Only what the caller set: the server's defaults stay the single source of truth.
        hyperparameters = hyperparameters.model_dump(exclude_unset=True)
    body: dict[str, Any] = {
        "dataset_id": dataset.id if isinstance(dataset, Dataset) else dataset,
        "reward_functions": reward_functions_request(reward_functions),
        "base_model": base_model,
        "hyperparameters": dict(hyperparameters or {}),
        "name": name,
        "allow_network": allow_network,
        "runtime_packages": list(runtime_packages),
    }
    # Made once per call and reused by every retry, so a retried create cannot make two jobs.
    headers = {"Idempotency-Key": idempotency_key or new_idempotency_key()}
    return RequestOptions("POST", "/v1/jobs", json=body, headers=headers)


def _page_request(
    path: str, cursor_param: str, cursor: str | None, **params: Any
) -> RequestOptions:
    return RequestOptions("GET", path, params={cursor_param: cursor, **params})


def _config_from_response(response: httpx.Response) -> JobConfig:
    config = JobConfig.model_validate(response.json())
    config.etag = response.headers.get("ETag")
    return config


def _update_config_request(
    job_id: str, config: JobConfig | Mapping[str, Any], *, dry_run: bool, check_version: bool
) -> RequestOptions:
    if not isinstance(config, JobConfig):
        config = JobConfig.model_validate(config)
    headers: dict[str, str] = {}
    if check_version:
        if config.etag:
            headers["If-Match"] = config.etag
        elif config.version is not None:
            headers["If-Match"] = f'"{config.version}"'
    return RequestOptions(
        "PUT",
        f"/v1/jobs/{job_id}/config",
        params={"dry_run": "true"} if dry_run else None,
        json=config.to_update_request(),
        headers=headers,
    )


def _update_result(response: httpx.Response, dry_run: bool) -> ConfigUpdate | DryRunResult:
    if dry_run:
        return DryRunResult.model_validate(response.json())
    return ConfigUpdate.model_validate(response.json())


class _WaitClock:
    def __init__(self, job_id: str, timeout: float | None) -> None:
        self.job_id = job_id
        self.deadline = None if timeout is None else time.monotonic() + timeout
        self.timeout = timeout

    def check(self, job: Job) -> None:
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise TimeoutError(
                f"job {self.job_id} is still {job.status.value} at step {job.steps_completed} "
                f"after {self.timeout} s"
            )


def _wait_is_over(job: Job, until_step: int | None) -> bool:
    return job.status.is_terminal or (until_step is not None and job.steps_completed >= until_step)


class Jobs:
    def __init__(self, transport: SyncTransport) -> None:
        self._transport = transport

    def _get_json(self, path: str, **params: Any) -> Any:
        return self._transport.request(RequestOptions("GET", path, params=params)).json()

    def create(
        self,
        *,
        dataset: str | Dataset,
        reward_functions: RewardFunctionsInput,
        base_model: str = DEFAULT_BASE_MODEL,
        hyperparameters: Hyperparameters | Mapping[str, Any] | None = None,
        name: str | None = None,
        allow_network: bool = False,
        runtime_packages: Sequence[str] = (),
        idempotency_key: str | None = None,
    ) -> Job:
        """Start a GRPO job.

        ``reward_functions`` maps a name to a Python function, a source string, or
        ``RewardFunction(fn_or_source, weight=...)``. An Idempotency-Key is always sent (a fresh
        one unless given), so retries after a lost response return the same job.
        """
        options = _create_request(
            dataset=dataset,
            reward_functions=reward_functions,
            base_model=base_model,
            hyperparameters=hyperparameters,
            name=name,
            allow_network=allow_network,
            runtime_packages=runtime_packages,
            idempotency_key=idempotency_key,
        )
        return Job.model_validate(self._transport.request(options).json())

    def get(self, job_id: str, /) -> Job:
        return Job.model_validate(self._get_json(f"/v1/jobs/{job_id}"))

    def list(self, *, status: str | None = None, limit: int | None = None) -> PageIterator[Job]:
        """Every job (optionally of one status), newest first; ``limit`` is the page size."""

        def fetch(cursor: str | None) -> Page[Job]:
            options = _page_request("/v1/jobs", "after", cursor, status=status, limit=limit)
            return Page[Job].model_validate(self._transport.request(options).json())

        return PageIterator(fetch)

    def cancel(self, job_id: str, /) -> Job:
        options = RequestOptions("POST", f"/v1/jobs/{job_id}/cancel")
        return Job.model_validate(self._transport.request(options).json())

    def steps(self, job_id: str, /, *, after_step: int = 0) -> builtins.list[Step]:
        """The recorded steps after ``after_step``, in order."""

        def fetch(cursor: str | None) -> Page[Step]:
            options = _page_request(
                f"/v1/jobs/{job_id}/steps", "after_step", cursor or str(after_step)
            )
            return Page[Step].model_validate(self._transport.request(options).json())

        return PageIterator(fetch).to_list()

    def completions(
        self, job_id: str, /, *, step: int | None = None, limit: int | None = None
    ) -> PageIterator[Completion]:
        """Recorded completions (of one step, if given) in order; ``limit`` is the page size."""

        def fetch(cursor: str | None) -> Page[Completion]:
            options = _page_request(
                f"/v1/jobs/{job_id}/completions", "after", cursor, step=step, limit=limit
            )
            return Page[Completion].model_validate(self._transport.request(options).json())

        return PageIterator(fetch)

    def events(self, job_id: str, /, *, after: int = 0) -> PageIterator[JobEvent]:
        def fetch(cursor: str | None) -> Page[JobEvent]:
            options = _page_request(
                f"/v1/jobs/{job_id}/events/history", "after", cursor or str(after)
            )
            return Page[JobEvent].model_validate(self._transport.request(options).json())

        return PageIterator(fetch)

    def logs(
        self, job_id: str, /, *, step: int | None = None, function: str | None = None
    ) -> PageIterator[RewardFunctionLog]:
        """What reward functions printed, per step and function."""

        def fetch(cursor: str | None) -> Page[RewardFunctionLog]:
            options = _page_request(
                f"/v1/jobs/{job_id}/logs", "after", cursor, step=step, function=function
            )
            return Page[RewardFunctionLog].model_validate(self._transport.request(options).json())

        return PageIterator(fetch)

    def reward_errors(
        self, job_id: str, /, *, step: int | None = None, function: str | None = None
    ) -> PageIterator[RewardError]:
        """Reward functions' failures on single samples (exceptions, timeouts, bad returns)."""

        def fetch(cursor: str | None) -> Page[RewardError]:
            options = _page_request(
                f"/v1/jobs/{job_id}/reward-errors", "after", cursor, step=step, function=function
            )
            return Page[RewardError].model_validate(self._transport.request(options).json())

        return PageIterator(fetch)

    def get_config(self, job_id: str, /) -> JobConfig:
        """The job's live config; edit it and pass it to :meth:`update_config`."""
        options = RequestOptions("GET", f"/v1/jobs/{job_id}/config")
        return _config_from_response(self._transport.request(options))

    def config_versions(self, job_id: str, /) -> builtins.list[JobConfig]:
        """Every config the job has had, oldest first."""
        data = self._get_json(f"/v1/jobs/{job_id}/config/versions")
        return [JobConfig.model_validate(item) for item in data]

    @overload
    def update_config(
        self,
        job_id: str,
        config: JobConfig | Mapping[str, Any],
        /,
        *,
        dry_run: Literal[False] = False,
        check_version: bool = True,
    ) -> ConfigUpdate: ...

    @overload
    def update_config(
        self,
        job_id: str,
        config: JobConfig | Mapping[str, Any],
        /,
        *,
        dry_run: Literal[True],
        check_version: bool = True,
    ) -> DryRunResult: ...

    def update_config(
        self,
        job_id: str,
        config: JobConfig | Mapping[str, Any],
        /,
        *,
        dry_run: bool = False,
        check_version: bool = True,
    ) -> ConfigUpdate | DryRunResult:
        """Change reward functions, weights or sampling of a running job.

        With ``check_version`` (the default) a config read by :meth:`get_config` is sent with
        If-Match, so a change made by someone else in between raises PreconditionFailedError
        instead of being overwritten. ``dry_run=True`` rescores the last recorded step with the
        new functions and changes nothing.
        """
        options = _update_config_request(
            job_id, config, dry_run=dry_run, check_version=check_version
        )
        return _update_result(self._transport.request(options), dry_run)

    def wait(
        self,
        job_id: str,
        /,
        *,
        until_step: int | None = None,
        progress: bool = False,
        poll_interval: float = DEFAULT_POLL_INTERVAL_S,
        timeout: float | None = None,
    ) -> Job:
        """Poll until the job ends (or has recorded ``until_step`` steps); returns the job."""
        clock = _WaitClock(job_id, timeout)
        display: JobProgress | None = job_progress() if progress else None
        try:
            while True:
                job = self.get(job_id)
                if display is not None:
                    display.show(job)
                if _wait_is_over(job, until_step):
                    return job
                clock.check(job)
                time.sleep(poll_interval)
        finally:
            if display is not None:
                display.close()

    def stream(
        self, job_id: str, /, *, poll_interval: float = DEFAULT_POLL_INTERVAL_S
    ) -> Iterator[Step | JobEvent]:
        """Yield each new step and event as it is recorded, until the job ends.

        Polls the history endpoints; the status is read before draining, so nothing recorded
        before the job ended is missed.
        """
        last_step = 0
        last_event = 0
        while True:
            finished = self.get(job_id).status.is_terminal
            for step in self.steps(job_id, after_step=last_step):
                last_step = step.step
                yield step
            for event in self.events(job_id, after=last_event):
                last_event = event.id
                yield event
            if finished:
                return
            time.sleep(poll_interval)


class AsyncJobs:
    def __init__(self, transport: AsyncTransport) -> None:
        self._transport = transport

    async def _get_json(self, path: str, **params: Any) -> Any:
        return (await self._transport.request(RequestOptions("GET", path, params=params))).json()

    async def create(
        self,
        *,
        dataset: str | Dataset,
        reward_functions: RewardFunctionsInput,
        base_model: str = DEFAULT_BASE_MODEL,
        hyperparameters: Hyperparameters | Mapping[str, Any] | None = None,
        name: str | None = None,
        allow_network: bool = False,
        runtime_packages: Sequence[str] = (),
        idempotency_key: str | None = None,
    ) -> Job:
        options = _create_request(
            dataset=dataset,
            reward_functions=reward_functions,
            base_model=base_model,
            hyperparameters=hyperparameters,
            name=name,
            allow_network=allow_network,
            runtime_packages=runtime_packages,
            idempotency_key=idempotency_key,
        )
        return Job.model_validate((await self._transport.request(options)).json())

    async def get(self, job_id: str, /) -> Job:
        return Job.model_validate(await self._get_json(f"/v1/jobs/{job_id}"))

    def list(
        self, *, status: str | None = None, limit: int | None = None
    ) -> AsyncPageIterator[Job]:
        async def fetch(cursor: str | None) -> Page[Job]:
            options = _page_request("/v1/jobs", "after", cursor, status=status, limit=limit)
            return Page[Job].model_validate((await self._transport.request(options)).json())

        return AsyncPageIterator(fetch)

    async def cancel(self, job_id: str, /) -> Job:
        options = RequestOptions("POST", f"/v1/jobs/{job_id}/cancel")
        return Job.model_validate((await self._transport.request(options)).json())

    async def steps(self, job_id: str, /, *, after_step: int = 0) -> builtins.list[Step]:
        async def fetch(cursor: str | None) -> Page[Step]:
            options = _page_request(
                f"/v1/jobs/{job_id}/steps", "after_step", cursor or str(after_step)
            )
            return Page[Step].model_validate((await self._transport.request(options)).json())

        return await AsyncPageIterator(fetch).to_list()

    def completions(
        self, job_id: str, /, *, step: int | None = None, limit: int | None = None
    ) -> AsyncPageIterator[Completion]:
        async def fetch(cursor: str | None) -> Page[Completion]:
            options = _page_request(
                f"/v1/jobs/{job_id}/completions", "after", cursor, step=step, limit=limit
            )
            return Page[Completion].model_validate((await self._transport.request(options)).json())

        return AsyncPageIterator(fetch)

    def events(self, job_id: str, /, *, after: int = 0) -> AsyncPageIterator[JobEvent]:
        async def fetch(cursor: str | None) -> Page[JobEvent]:
            options = _page_request(
                f"/v1/jobs/{job_id}/events/history", "after", cursor or str(after)
            )
            return Page[JobEvent].model_validate((await self._transport.request(options)).json())

        return AsyncPageIterator(fetch)

    def logs(
        self, job_id: str, /, *, step: int | None = None, function: str | None = None
    ) -> AsyncPageIterator[RewardFunctionLog]:
        async def fetch(cursor: str | None) -> Page[RewardFunctionLog]:
            options = _page_request(
                f"/v1/jobs/{job_id}/logs", "after", cursor, step=step, function=function
            )
            response = await self._transport.request(options)
            return Page[RewardFunctionLog].model_validate(response.json())

        return AsyncPageIterator(fetch)

    def reward_errors(
        self, job_id: str, /, *, step: int | None = None, function: str | None = None
    ) -> AsyncPageIterator[RewardError]:
        async def fetch(cursor: str | None) -> Page[RewardError]:
            options = _page_request(
                f"/v1/jobs/{job_id}/reward-errors", "after", cursor, step=step, function=function
            )
            response = await self._transport.request(options)
            return Page[RewardError].model_validate(response.json())

        return AsyncPageIterator(fetch)

    async def get_config(self, job_id: str, /) -> JobConfig:
        options = RequestOptions("GET", f"/v1/jobs/{job_id}/config")
        return _config_from_response(await self._transport.request(options))

    async def config_versions(self, job_id: str, /) -> builtins.list[JobConfig]:
        data = await self._get_json(f"/v1/jobs/{job_id}/config/versions")
        return [JobConfig.model_validate(item) for item in data]

    @overload
    async def update_config(
        self,
        job_id: str,
        config: JobConfig | Mapping[str, Any],
        /,
        *,
        dry_run: Literal[False] = False,
        check_version: bool = True,
    ) -> ConfigUpdate: ...

    @overload
    async def update_config(
        self,
        job_id: str,
        config: JobConfig | Mapping[str, Any],
        /,
        *,
        dry_run: Literal[True],
        check_version: bool = True,
    ) -> DryRunResult: ...

    async def update_config(
        self,
        job_id: str,
        config: JobConfig | Mapping[str, Any],
        /,
        *,
        dry_run: bool = False,
        check_version: bool = True,
    ) -> ConfigUpdate | DryRunResult:
        options = _update_config_request(
            job_id, config, dry_run=dry_run, check_version=check_version
        )
        return _update_result(await self._transport.request(options), dry_run)

    async def wait(
        self,
        job_id: str,
        /,
        *,
        until_step: int | None = None,
        progress: bool = False,
        poll_interval: float = DEFAULT_POLL_INTERVAL_S,
        timeout: float | None = None,
    ) -> Job:
        clock = _WaitClock(job_id, timeout)
        display: JobProgress | None = job_progress() if progress else None
        try:
            while True:
                job = await self.get(job_id)
                if display is not None:
                    display.show(job)
                if _wait_is_over(job, until_step):
                    return job
                clock.check(job)
                await asyncio.sleep(poll_interval)
        finally:
            if display is not None:
                display.close()

    async def stream(
        self, job_id: str, /, *, poll_interval: float = DEFAULT_POLL_INTERVAL_S
    ) -> AsyncIterator[Step | JobEvent]:
        last_step = 0
        last_event = 0
        while True:
            finished = (await self.get(job_id)).status.is_terminal
            for step in await self.steps(job_id, after_step=last_step):
                last_step = step.step
                yield step
            async for event in self.events(job_id, after=last_event):
                last_event = event.id
                yield event
            if finished:
                return
            await asyncio.sleep(poll_interval)
