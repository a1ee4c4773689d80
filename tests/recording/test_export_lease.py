"""Who builds an export (service.exports.ownership): one worker takes it, moves need its
claim, a lost worker's export is queued again a few times at most, and a token given with
the request is gone once the export ends."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy.orm import Session

from service.db import AFTER_COMMIT_KEY, session_scope
from service.exports import ownership
from service.exports.status import MAX_ATTEMPTS
from service.leases import ExpiredLease, HeldBy
from service.models import Export, new_id
from service.secrets import seal
from service.settings import get_settings
from workers.lease import EXPORTS, LostWorkerReaper


def new_export(session: Session, job_id: str, **fields: object) -> Export:
    """A queued merged-model push, with a token given with its request (``fields`` override)."""
    export = Export(
        **{
            "id": new_id("exp"),
            "job_id": job_id,
            "kind": "merged",
            "dtype": "auto",
            "hub_repo": "me/model",
            "hub_token_sealed": seal({ownership.REQUEST_TOKEN: "hf_secret"}, get_settings()),
            "status": "queued",
            "progress": 0.0,
            "attempts": 0,
            **fields,
        }
    )
    session.add(export)
    session.flush()
    return export


def test_one_worker_takes_it_and_a_repeated_message_is_dropped(
    session: Session, job_id: str
) -> None:
    export = new_export(session, job_id)
    work = ownership.take(session, export.id, "worker-a")
    assert work is not None and work.adapter_uri is None
    assert ownership.hub_token(session, export.id) == "hf_secret"
    assert (export.status, export.worker_id, export.attempts) == ("running", "worker-a", 1)
    assert ownership.take(session, export.id, "worker-b") is None
    assert not ownership.report(session, export.id, HeldBy("worker-b"), "loading", 0.1)
    assert ownership.report(session, export.id, HeldBy("worker-a"), "loading", 0.1)
    assert not ownership.finish(session, export.id, HeldBy("worker-b"))
    assert ownership.finish(session, export.id, HeldBy("worker-a"), hub_commit_url="u")
    session.flush()
    session.expire(export)
    assert export.status == "succeeded" and export.progress == 1.0
    assert export.hub_token_sealed is None and export.worker_id is None


def test_a_lost_workers_export_is_queued_again_then_fails_after_its_last_try(
    session: Session, job_id: str
) -> None:
    export = new_export(session, job_id)
    for attempt in range(1, MAX_ATTEMPTS + 1):
        assert ownership.take(session, export.id, f"worker-{attempt}") is not None
        heartbeat = export.heartbeat_at
        stale = ExpiredLease((heartbeat or datetime.now(UTC)) - timedelta(seconds=1))
        assert not ownership.requeue(session, export.id, stale, why="lost")  # it beat since
        assert ownership.requeue(session, export.id, ExpiredLease(heartbeat), why="lost")
    assert export.status == "failed"
    assert export.failure_reason == f"lost, on each of {MAX_ATTEMPTS} tries"
    assert export.hub_token_sealed is None
    # Queued again after each try but the last: one message each.
    assert len(session.info[AFTER_COMMIT_KEY]) == MAX_ATTEMPTS - 1


def test_the_reaper_finds_an_export_whose_heartbeat_stood_still(job_id: str) -> None:
    with session_scope() as session:
        export = new_export(
            session,
            job_id,
            status="running",
            worker_id="worker-gone",
            heartbeat_at=datetime.now(UTC),
            attempts=MAX_ATTEMPTS,  # failed, not queued: no message reaches the test worker
        )
        export_id = export.id
    reaper = LostWorkerReaper(lease_s=30, queued_resend_after_s=120)
    assert reaper.requeue_lost(EXPORTS, now=1000.0) == []
    assert reaper.requeue_lost(EXPORTS, now=1029.0) == []
    assert reaper.requeue_lost(EXPORTS, now=1031.0) == [export_id]
    with session_scope() as session:
        lost = session.get(Export, export_id)
        assert lost is not None and lost.status == "failed"
        assert "stopped answering (no heartbeat for 30 s)" in (lost.failure_reason or "")
