"""Experiment trackers a job reports to (TRL's ``report_to``), and the settings they read.

Trackers read their settings from the worker process's environment (transformers' callbacks
call ``os.getenv``), not from the sandbox: reward code never sees them. A job may carry them as
secrets instead: for the duration of its run, the job's secrets named below are set in the
worker's environment, only for the trackers it reports to, and the worker's own values come
back afterwards. (Each Celery worker process runs one job at a time, so no other job sees them.)
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

from workers.failures import TrackerSetupError
from workers.process_environment import environment_for_block

# What each tracker reads from the environment (transformers' integration_utils).
TRACKER_ENVIRONMENT: dict[str, tuple[str, ...]] = {
    "wandb": (
        "WANDB_API_KEY",
        "WANDB_PROJECT",
        "WANDB_ENTITY",
        "WANDB_BASE_URL",
        "WANDB_MODE",
        "WANDB_LOG_MODEL",
        "WANDB_TAGS",
    ),
    "mlflow": (
        "MLFLOW_TRACKING_URI",
        "MLFLOW_TRACKING_USERNAME",
        "MLFLOW_TRACKING_PASSWORD",
        "MLFLOW_TRACKING_TOKEN",
        "MLFLOW_EXPERIMENT_NAME",
        "MLFLOW_TAGS",
    ),
    # TensorBoard writes event files under the job's output folder; nothing to configure.
    "tensorboard": (),
    # trackio logs locally; HF_TOKEN lets it sync to a Hugging Face Space.
    "trackio": ("HF_TOKEN",),
}
# The package each tracker needs on the worker.
TRACKER_PACKAGE = {
    "wandb": "wandb",
    "mlflow": "mlflow",
    "tensorboard": "tensorboard",
    "trackio": "trackio",
}


def check_trackers_installed(report_to: Sequence[str]) -> None:
    """Fail the job before any work when a tracker's package is missing on this worker."""
    missing = [t for t in report_to if importlib.util.find_spec(TRACKER_PACKAGE[t]) is None]
    if missing:
        packages = " ".join(TRACKER_PACKAGE[t] for t in missing)
        raise TrackerSetupError(
            f"report_to {missing}: this worker has no {packages!r} package; install it on the "
            f"workers (pip install {packages}) or leave the tracker out of report_to"
        )


def tracker_variables(report_to: Sequence[str], secrets: Mapping[str, str]) -> dict[str, str]:
    """The job's secrets that configure one of its trackers."""
    wanted = {name for tracker in report_to for name in TRACKER_ENVIRONMENT[tracker]}
    return {name: value for name, value in secrets.items() if name in wanted}


@contextmanager
def tracker_environment(report_to: Sequence[str], secrets: Mapping[str, str]) -> Iterator[None]:
    """Set the job's tracker secrets in this process's environment while the run lasts."""
    with environment_for_block(tracker_variables(report_to, secrets)):
        yield
