"""Fixtures of the API tests beyond the session's stack (tests/conftest.py)."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from service.db import session_scope
from service.errors import IllegalTransition
from service.jobs.status import JobStatus
from service.jobs.transitions import transition
from service.models import Job
from service.stack import LocalStack
from tests.conftest import tenant_client
from tests.public_network import HTTP_PORT, public_addresses

# The idle stack's settings that tests use: a folder of model directories (RFT_MODEL_ROOTS,
# under its state folder) and the token its /metrics wants.
IDLE_MODEL_ROOT = "models"
IDLE_METRICS_TOKEN = "scrape-token-4b1d9e"
UNFINISHED = (JobStatus.QUEUED, JobStatus.RUNNING, JobStatus.PAUSING, JobStatus.PAUSED)


@pytest.fixture(autouse=True)
def no_training_left_behind(request: pytest.FixtureRequest) -> Iterator[None]:
    """The API tests check what the API answers. A job one of them created and left unfinished
    would still be trained by the session stack's one worker, and every later test that trains
    would wait behind it (minutes in CI). At teardown the jobs created during the test that
    have not ended are cancelled, as a user would."""
    started = datetime.now(UTC)
    yield
    if "stack" not in request.fixturenames:
        return  # the session's stack (and its worker) was never involved
    with session_scope() as session:
        job_ids = session.scalars(
            select(Job.id).where(
                Job.created_at >= started, Job.status.in_([s.value for s in UNFINISHED])
            )
        ).all()
    for job_id in job_ids:
        with session_scope() as session:
            job = session.get(Job, job_id, with_for_update=True)
            if job is None:
                continue
            with contextlib.suppress(IllegalTransition):  # it ended meanwhile
                transition(session, job, JobStatus.CANCELLED, reason="the test has ended")


@pytest.fixture(scope="session")
def idle_stack() -> Iterator[LocalStack]:
    """A stack without workers, one for the session: its jobs are only created and edited,
    never trained, so they stay `queued` and take config updates whatever the training code
    would do with them (no race with a job that finishes first), and any hyperparameters
    (the fuzzer's) are safe there. Each user signs in as a tenant of its own."""
    state_dir = Path(tempfile.mkdtemp(prefix="rft-idle-api-"))
    env = {
        # No model hub can be reached from here: a made-up base model id would otherwise be
        # the hub check's 503 (an outside edge, not bad input).
        "RFT_HUB_CHECK": "off",
        # Models a test lays out (config.json files) in a folder of its own under this root.
        "RFT_MODEL_ROOTS": str(state_dir / IDLE_MODEL_ROOT),
        "RFT_METRICS_TOKEN": IDLE_METRICS_TOKEN,
        # The operator allows the tests' public side's plain-http port, as a deployment would
        # an internal tool service (tests/api/test_http_tools.py); everything else is https.
        "RFT_SANDBOX_EGRESS_ALLOW": f"{public_addresses().address}:{HTTP_PORT}",
    }
    try:
        (state_dir / IDLE_MODEL_ROOT).mkdir()
        with LocalStack(state_dir, workers=0, extra_env=env) as stack:
            yield stack
    finally:
        shutil.rmtree(state_dir, ignore_errors=True)


def idle_model_root(stack: LocalStack) -> Path:
    return stack.state_dir / IDLE_MODEL_ROOT


@pytest.fixture(scope="module")
def idle_api(idle_stack: LocalStack) -> Iterator[tuple[LocalStack, httpx.Client]]:
    """The idle stack, and a client of a tenant of this module's own."""
    with tenant_client(idle_stack) as client:
        yield idle_stack, client
