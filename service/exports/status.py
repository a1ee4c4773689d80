"""The export state machine: every allowed move is listed here and nowhere else.

An export waits in the queue (``queued``) until a worker takes it (``running``, with the
worker's id and heartbeat: its lease); it ends ``succeeded`` or ``failed``. A worker lost while
it runs sends it back to the queue (the lost-worker reaper, workers.lease), a few times at
most (``MAX_ATTEMPTS``), then it fails saying so.
"""

from __future__ import annotations

from enum import StrEnum

from service.leases import StateMachine


class ExportStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"

    @property
    def is_terminal(self) -> bool:
        return self in (ExportStatus.SUCCEEDED, ExportStatus.FAILED)


class ExportStage(StrEnum):
    """What a running export is doing, in order (a hub push of an adapter only uploads)."""

    LOADING = "loading"  # the base model and the adapter
    MERGING = "merging"
    SAVING = "saving"  # the merged model as safetensors
    ARCHIVING = "archiving"  # the .tar.gz
    STORING = "storing"  # the archive into the artifact store
    UPLOADING = "uploading"  # to the hub


ALLOWED_TRANSITIONS: dict[ExportStatus, frozenset[ExportStatus]] = {
    ExportStatus.QUEUED: frozenset({ExportStatus.RUNNING, ExportStatus.FAILED}),
    # QUEUED: its worker was lost; another one starts it again.
    ExportStatus.RUNNING: frozenset(
        {ExportStatus.SUCCEEDED, ExportStatus.FAILED, ExportStatus.QUEUED}
    ),
    ExportStatus.SUCCEEDED: frozenset(),
    ExportStatus.FAILED: frozenset(),
}

# Workers lost while running one export before it fails instead of being queued again (a
# merge that kills its worker every time, e.g. out of memory, must not loop forever).
MAX_ATTEMPTS = 3


EXPORT_STATES = StateMachine("export", ALLOWED_TRANSITIONS)
