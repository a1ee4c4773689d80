"""Jobs held by a stand-in worker, for the client-side tests of pause, resume and cancel (the
SDK, the CLI, the openai client): the tests move them through the real API, and no training
runs.

What each move does to a job is tested at the row (tests/recording/test_job_lease.py); that a
real worker obeys (checkpoints the step it is on, lets go, continues from the checkpoint) is
shown once end to end (tests/integration/test_faults.py). A client test only needs a job in
the right state, and a worker that lets go when told: that is ``let_go``.

The job asks for more devices than any test worker gives, so a resume that queues it again
sends it to a queue nobody consumes: it stays queued until the test cancels it.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import UTC, datetime

from sqlalchemy.orm import Session

from service.auth.repository import AuthRepository
from service.auth.service import hash_api_key
from service.db import session_scope
from service.jobs import ownership
from service.leases import HeldBy
from service.models import Dataset, Job, new_id

STAND_IN_WORKER = "stand-in-worker"
# More than any test stack's worker gives one job (RFT_WORKER_DEVICES is 1 or 2 there).
UNCLAIMED_DEVICES = 64


def stored_dataset(session: Session, tenant_id: str, name: str) -> Dataset:
    """A dataset row of four text prompts (no rows stored): what a job row needs to exist."""
    dataset = Dataset(
        id=new_id("ds"),
        tenant_id=tenant_id,
        name=name,
        file_format="jsonl",
        row_count=4,
        columns=["prompt"],
        prompt_kind="text",
        size_bytes=0,
        sha256="0" * 64,
    )
    session.add(dataset)
    session.flush()
    return dataset


def held_job(
    api_key: str,
    *,
    steps_completed: int = 2,
    train_steps: int = 100,
    unit_of_work: Callable[[], AbstractContextManager[Session]] = session_scope,
) -> str:
    """A running job of ``api_key``'s tenant, held by the stand-in worker, ``steps_completed``
    steps in; ``unit_of_work``: a transaction on another stack's database than the session's."""
    with unit_of_work() as session:
        key = AuthRepository(session).get_active_key_by_hash(hash_api_key(api_key))
        assert key is not None, "unknown API key"
        dataset = stored_dataset(session, key.tenant_id, "held")
        job = Job(
            id=new_id("job"),
            tenant_id=key.tenant_id,
            dataset_id=dataset.id,
            base_model="rft-tiny",
            hyperparameters={"train_steps": train_steps},
            num_devices=UNCLAIMED_DEVICES,
            status="running",
            worker_id=STAND_IN_WORKER,
            heartbeat_at=datetime.now(UTC),
            started_at=datetime.now(UTC),
            steps_completed=steps_completed,
        )
        session.add(job)
        return job.id


def let_go(job_id: str) -> None:
    """The stand-in worker lets go, as a real one does once the step it was on is done and
    its checkpoint saved: a pausing job reads paused; one resumed meanwhile is queued."""
    with session_scope() as session:
        ownership.release(session, job_id, HeldBy(STAND_IN_WORKER))
