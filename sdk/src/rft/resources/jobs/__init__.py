"""``client.jobs``: one module per sub-resource of a job, each a sync and an async class over
the request builders they share; jobs.py makes ``Jobs`` and ``AsyncJobs`` of them."""

from rft.resources.jobs.events import StreamItem, StreamItemWithJob
from rft.resources.jobs.exports import AsyncExports, Exports
from rft.resources.jobs.jobs import CREATE_DEFAULTS, DEFAULT_POLL_INTERVAL_S, AsyncJobs, Jobs
from rft.resources.jobs.jobs import _create_request as _create_request

__all__ = [
    "CREATE_DEFAULTS",
    "DEFAULT_POLL_INTERVAL_S",
    "AsyncExports",
    "AsyncJobs",
    "Exports",
    "Jobs",
    "StreamItem",
    "StreamItemWithJob",
]
