"""The errors every layer of a worker raises, and the one line a failure becomes.

The bottom layer of ``workers/``: it imports nothing of the worker's own. A ``UserFacingFailure``'s
message is written for the job's user (it becomes the job's failure_reason as it is); any
other exception is described by its type, message and where it was raised.
"""

from __future__ import annotations

import traceback
from pathlib import Path

from sandbox.runtime_packages import PackageInstallError
from service.secrets import SecretsKeyError


class UserFacingFailure(RuntimeError):
    """A failure whose message, as it is, tells the job's user what went wrong."""


class TrainingProcessError(UserFacingFailure):
    """The training processes failed; the message is the job's failure reason."""


class GenerationSetupError(UserFacingFailure):
    """The worker's generation settings cannot work on this machine."""


class TrackerSetupError(UserFacingFailure):
    """The job asked for a tracker this worker cannot report to."""


class EngineUnavailable(UserFacingFailure):
    """This worker cannot run the engine a job asks for; the message says why."""


class StartingWeightsMissing(UserFacingFailure):
    """The job's copy of its init_from weights is gone from the artifact store."""


class ExportFailure(UserFacingFailure):
    """An export (workers.export) cannot be built or pushed; the message says why."""


class NodeLost(RuntimeError):
    """A job over several machines lost one of them (or was taken from this one): not the
    job's failure, the job resumes from its last checkpoint on a fresh placement."""


class RecordingFailed(RuntimeError):
    """The background writer could not store something: the run must not go on without it."""


def describe_failure(exc: BaseException) -> str:
    """One readable line for the job's failure_reason; the traceback goes to the logs."""
    if isinstance(exc, UserFacingFailure | PackageInstallError | SecretsKeyError):
        return str(exc)
    last_frame = traceback.extract_tb(exc.__traceback__)[-1:] if exc.__traceback__ else []
    where = (
        f" (at {Path(last_frame[0].filename).name}:{last_frame[0].lineno})" if last_frame else ""
    )
    return f"{type(exc).__name__}: {exc}{where}"[:2000]


class TrainingOptionUnavailable(UserFacingFailure):
    """The job asks for a training option this worker cannot run (QLoRA without a CUDA GPU or
    bitsandbytes, flash attention without flash-attn...); the message names it."""
