"""A job's live config: read, its versions, changed (or tried with a dry run)."""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from typing import Any, Literal, overload

import httpx

from rft.models import ConfigUpdate, DryRunResult, JobConfig
from rft.resources.jobs.resource import AsyncJobsResource, JobsResource
from rft.transport import RequestOptions


def _config_from_response(response: httpx.Response) -> JobConfig:
    config = JobConfig.model_validate(response.json())
    config.etag = response.headers.get("ETag")
    return config


def _update_config_request(
    job_id: str,
    config: JobConfig | Mapping[str, Any],
    *,
    dry_run: bool,
    check_version: bool,
    secrets: Mapping[str, str | None] | None,
) -> RequestOptions:
    if not isinstance(config, JobConfig):
        config = JobConfig.model_validate(config)
    headers: dict[str, str] = {}
    if check_version:
        if config.etag:
            headers["If-Match"] = config.etag
        elif config.version is not None:
            headers["If-Match"] = f'"{config.version}"'
        # else: no version known; the server requires one (PreconditionRequiredError).
    else:
        headers["If-Match"] = "*"  # whatever version is current
    return RequestOptions(
        "PUT",
        f"/v1/jobs/{job_id}/config",
        params={"dry_run": "true"} if dry_run else None,
        json={**config.to_update_request(), **({"secrets": dict(secrets)} if secrets else {})},
        headers=headers,
    )


def _update_result(response: httpx.Response, dry_run: bool) -> ConfigUpdate | DryRunResult:
    if dry_run:
        return DryRunResult.model_validate(response.json())
    return ConfigUpdate.model_validate(response.json())


class ConfigMethods(JobsResource):
    """``client.jobs`` methods for the live config."""

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
        secrets: Mapping[str, str | None] | None = None,
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
        secrets: Mapping[str, str | None] | None = None,
    ) -> DryRunResult: ...

    def update_config(
        self,
        job_id: str,
        config: JobConfig | Mapping[str, Any],
        /,
        *,
        dry_run: bool = False,
        check_version: bool = True,
        secrets: Mapping[str, str | None] | None = None,
    ) -> ConfigUpdate | DryRunResult:
        """Change reward functions, weights, sampling, tools or environments of a running job.

        Agent jobs: ``config.tools = {"search": search}`` (functions, ``rft.Tool`` or source)
        and ``config.environments = {"calc": rft.Environment.from_file(...)}`` replace their
        code from the next step; a config read by :meth:`get_config` sends back the ones it
        holds, so a change to the rewards keeps them.

        With ``check_version`` (the default) a config read by :meth:`get_config` is sent with
        If-Match, so a change made by someone else in between raises PreconditionFailedError
        instead of being overwritten; the server requires If-Match, so a config with no
        version raises PreconditionRequiredError. ``check_version=False`` replaces whatever
        version is current (If-Match: *). ``dry_run=True`` rescores the last recorded step with
        the new functions and changes nothing.

        ``secrets`` rotates the job's secrets from the same step: a value sets or replaces
        one, ``None`` removes it, names not given keep their values (never returned: the
        result's config lists ``secret_names``).
        """
        options = _update_config_request(
            job_id, config, dry_run=dry_run, check_version=check_version, secrets=secrets
        )
        return _update_result(self._transport.request(options), dry_run)


class AsyncConfigMethods(AsyncJobsResource):
    """The async twin of :class:`ConfigMethods`."""

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
        secrets: Mapping[str, str | None] | None = None,
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
        secrets: Mapping[str, str | None] | None = None,
    ) -> DryRunResult: ...

    async def update_config(
        self,
        job_id: str,
        config: JobConfig | Mapping[str, Any],
        /,
        *,
        dry_run: bool = False,
        check_version: bool = True,
        secrets: Mapping[str, str | None] | None = None,
    ) -> ConfigUpdate | DryRunResult:
        options = _update_config_request(
            job_id, config, dry_run=dry_run, check_version=check_version, secrets=secrets
        )
        return _update_result(await self._transport.request(options), dry_run)
