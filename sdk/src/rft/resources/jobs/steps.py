"""A job's recorded steps and validation results, in step order."""

from __future__ import annotations

import builtins

from rft.models import Evaluation, Page, Step
from rft.pagination import get_api_list, get_async_api_list
from rft.resources.jobs.resource import AsyncJobsResource, JobsResource


class StepMethods(JobsResource):
    """``client.jobs`` methods for steps and evaluations."""

    def steps(self, job_id: str, /, *, after_step: int = 0) -> builtins.list[Step]:
        """The recorded steps after ``after_step``, in order."""
        return get_api_list(
            self._transport,
            f"/v1/jobs/{job_id}/steps",
            page=Page[Step],
            cursor_param="after_step",
            start=str(after_step),
        ).to_list()

    def evals(self, job_id: str, /, *, after_step: int = 0) -> builtins.list[Evaluation]:
        """The validation results after ``after_step``, in step order (the eval curve)."""
        return get_api_list(
            self._transport,
            f"/v1/jobs/{job_id}/evals",
            page=Page[Evaluation],
            cursor_param="after_step",
            start=str(after_step),
        ).to_list()


class AsyncStepMethods(AsyncJobsResource):
    """The async twin of :class:`StepMethods`."""

    async def steps(self, job_id: str, /, *, after_step: int = 0) -> builtins.list[Step]:
        return await get_async_api_list(
            self._transport,
            f"/v1/jobs/{job_id}/steps",
            page=Page[Step],
            cursor_param="after_step",
            start=str(after_step),
        ).to_list()

    async def evals(self, job_id: str, /, *, after_step: int = 0) -> builtins.list[Evaluation]:
        """See :meth:`Jobs.evals`."""
        return await get_async_api_list(
            self._transport,
            f"/v1/jobs/{job_id}/evals",
            page=Page[Evaluation],
            cursor_param="after_step",
            start=str(after_step),
        ).to_list()
