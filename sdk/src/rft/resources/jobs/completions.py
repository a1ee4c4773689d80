"""What a job sampled and what its reward functions printed or failed on."""

from __future__ import annotations

from rft.models import Completion, Page, RewardError, RewardFunctionLog
from rft.pagination import AsyncPageIterator, PageIterator, get_api_list, get_async_api_list
from rft.resources.jobs.resource import AsyncJobsResource, JobsResource


class CompletionMethods(JobsResource):
    """``client.jobs`` methods for completions, reward logs and reward errors."""

    def completions(
        self, job_id: str, /, *, step: int | None = None, limit: int | None = None
    ) -> PageIterator[Completion]:
        """Recorded completions (of one step, if given) in order; ``limit`` is the page size."""
        params = {"step": step, "limit": limit}
        return get_api_list(
            self._transport, f"/v1/jobs/{job_id}/completions", page=Page[Completion], params=params
        )

    def logs(
        self, job_id: str, /, *, step: int | None = None, function: str | None = None
    ) -> PageIterator[RewardFunctionLog]:
        """What reward functions printed, per step and function."""
        params = {"step": step, "function": function}
        return get_api_list(
            self._transport, f"/v1/jobs/{job_id}/logs", page=Page[RewardFunctionLog], params=params
        )

    def reward_errors(
        self, job_id: str, /, *, step: int | None = None, function: str | None = None
    ) -> PageIterator[RewardError]:
        """Reward functions' failures on single samples (exceptions, timeouts, bad returns)."""
        params = {"step": step, "function": function}
        return get_api_list(
            self._transport,
            f"/v1/jobs/{job_id}/reward-errors",
            page=Page[RewardError],
            params=params,
        )


class AsyncCompletionMethods(AsyncJobsResource):
    """The async twin of :class:`CompletionMethods`."""

    def completions(
        self, job_id: str, /, *, step: int | None = None, limit: int | None = None
    ) -> AsyncPageIterator[Completion]:
        params = {"step": step, "limit": limit}
        return get_async_api_list(
            self._transport, f"/v1/jobs/{job_id}/completions", page=Page[Completion], params=params
        )

    def logs(
        self, job_id: str, /, *, step: int | None = None, function: str | None = None
    ) -> AsyncPageIterator[RewardFunctionLog]:
        params = {"step": step, "function": function}
        return get_async_api_list(
            self._transport, f"/v1/jobs/{job_id}/logs", page=Page[RewardFunctionLog], params=params
        )

    def reward_errors(
        self, job_id: str, /, *, step: int | None = None, function: str | None = None
    ) -> AsyncPageIterator[RewardError]:
        params = {"step": step, "function": function}
        return get_async_api_list(
            self._transport,
            f"/v1/jobs/{job_id}/reward-errors",
            page=Page[RewardError],
            params=params,
        )
