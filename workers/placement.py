"""A job over several machines: placed on ``num_nodes`` workers at once, or on none.

The job's queue holds one message per node (service.work_queue.queue). Each worker that takes
one joins the job's placement in the database (a ``job_nodes`` row, under the job's row lock):
the first is node 0, the next node 1, and so on. They wait, holding their worker, until all
nodes have joined; then node 0 takes the job (queued -> running, the lease, the resume
checkpoint), picks the rendezvous port, and every node starts its own launcher (torchrun or
accelerate launch), which meet at node 0's address. Node 0's worker records the run exactly as a
one-machine job's does (rank 0 is one of its processes); the other nodes only run their ranks.

Nobody waits forever: a placement that is not complete within RFT_PLACEMENT_TIMEOUT_S is
abandoned (its rows deleted, a ``placement_timeout`` event, the messages queued again), so
the workers that waited go back to other jobs.

Every node beats its row. Node 0 watches the others: one that stops beating for a lease (its
worker died) or whose processes fail stops the run; a lost node makes the job resume from its
last checkpoint on a fresh placement, a failed one fails it. The others watch node 0 and
their placement: when node 0 is lost, or the run is over and node 0 removed the placement,
they stop their processes. A lost node 0 is a lost worker like any other (workers.lease).
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy.orm import Session

from service.db import after_commit, session_scope
from service.events.repository import EventRepository
from service.jobs import ownership
from service.jobs.heartbeats import HeartbeatSilence
from service.jobs.node_repository import JobNodeRepository
from service.jobs.repository import JobRepository
from service.jobs.status import JobStatus, NodeState
from service.leases import HeldBy
from service.models import Job, JobNode
from service.settings import Settings, get_settings
from service.work_queue.queue import enqueue_training
from workers.database import in_transaction, with_database_retries
from workers.failures import NodeLost, TrainingProcessError
from workers.training.engines import Rendezvous

logger = logging.getLogger(__name__)

POLL_S = 0.25
# A job in one of these is not waiting for its placement any more.
NOT_PLACING = frozenset(
    status.value for status in JobStatus if status not in (JobStatus.QUEUED, JobStatus.RUNNING)
)


# Node 0's worker takes the job (queued -> running, its lease); False: the job is not queued.
TakeJob = Callable[[str], bool]


@dataclass(frozen=True)
class Seat:
    """This worker's place in a job's placement."""

    job_id: str
    placement_id: str
    node_rank: int
    num_nodes: int
    worker_id: str


@dataclass(frozen=True)
class NodeView:
    node_rank: int
    worker_id: str
    state: NodeState
    detail: str | None
    heartbeat_at: datetime


@contextlib.contextmanager
def placed(job_id: str, worker_id: str, take_job: TakeJob) -> Iterator[NodeRun | None]:
    """Join ``job_id``'s placement (num_nodes > 1) and wait until it is complete: yields this
    worker's NodeRun, or None when it takes no part (the placement is full, timed out, or the
    job is not queued). Node 0 calls ``take_job`` (queued -> running) once all have joined.
    """
    settings = get_settings()
    seat = with_database_retries(
        lambda: _join(job_id, worker_id, settings), what=f"joining the placement of {job_id}"
    )
    if seat is None:
        yield None
        return
    logger.info(
        "job %s: joined its placement as node %d of %d", job_id, seat.node_rank, seat.num_nodes
    )
    with NodeWatch(seat, interval_s=max(0.25, settings.worker_lease_s / 6)) as watch:
        rendezvous = _wait_until_placed(seat, settings, watch, take_job)
        if rendezvous is None:
            yield None
            return
        run = NodeRun(seat, rendezvous, watch, settings)
        try:
            yield run
        finally:
            if seat.node_rank == 0:
                run.close()


def _join(job_id: str, worker_id: str, settings: Settings) -> Seat | None:
    with session_scope() as session:
        job = JobRepository(session).get_any_tenant(job_id, for_update=True)
        if job is None or job.status != JobStatus.QUEUED.value:
            return None  # a duplicate or stale message: the database says what runs
        nodes = JobNodeRepository(session)
        rows = nodes.placement(job_id)
        if rows and _stale(nodes, rows[0], settings):
            _abandon(session, job, rows, settings)  # workers that are gone: start afresh
            rows = []
        if len(rows) >= job.num_nodes or any(row.worker_id == worker_id for row in rows):
            return None  # the placement is full: an extra message
        placement_id = rows[0].placement_id if rows else uuid.uuid4().hex
        seat = Seat(job_id, placement_id, len(rows), job.num_nodes, worker_id)
        nodes.join(
            job_id, seat.node_rank, placement_id, worker_id, settings.resolved_worker_address
        )
        return seat


def _stale(nodes: JobNodeRepository, first: JobNode, settings: Settings) -> bool:
    """A placement left by workers that are gone: launched by a run that is over, or waiting
    past its timeout (plus a lease, for the workers' own clocks to have acted first)."""
    if first.state != NodeState.WAITING:
        return True
    return nodes.age_s(first) > settings.placement_timeout_s + settings.worker_lease_s


def _abandon(session: Session, job: Job, rows: list[JobNode], settings: Settings) -> None:
    """Give the placement up: rows gone, say why, queue its members' messages again."""
    JobNodeRepository(session).drop(job.id)
    if rows and rows[0].state == NodeState.WAITING:
        why = (
            f"only {len(rows)} of {job.num_nodes} workers with {job.num_devices} device(s) "
            f"each were free within {settings.placement_timeout_s:.0f} s (a job over several "
            "machines starts on all of them at once)"
            if len(rows) < job.num_nodes
            else f"its {len(rows)} workers stopped answering before it started"
        )
        EventRepository(session).add_event(
            job.id,
            "placement_timeout",
            f"{why}; the job waits in the queue again",
            data={"joined": len(rows), "num_nodes": job.num_nodes},
        )
    # The members' messages are spent; the others' still wait in the queue.
    job_id, num_devices, spent = job.id, job.num_devices, len(rows)
    after_commit(session, lambda: enqueue_training(job_id, num_devices, spent))


def _wait_until_placed(
    seat: Seat, settings: Settings, watch: NodeWatch, take_job: TakeJob
) -> Rendezvous | None:
    """Until every node joined and node 0 opened the rendezvous; None when the placement was
    given up (timed out, the job cancelled) and this worker is free again."""
    timeout_s = settings.placement_timeout_s
    if seat.node_rank != 0:
        timeout_s += settings.worker_lease_s  # node 0 gives up first, and says so
    deadline = time.monotonic() + timeout_s
    while True:
        if seat.node_rank == 0:
            if watch.joined() == seat.num_nodes:
                return _open_rendezvous(seat, take_job)
        else:
            rendezvous = watch.rendezvous()
            if rendezvous is not None:
                return rendezvous
        if watch.placement_gone() or watch.job_status() in NOT_PLACING:
            logger.info("job %s: placement given up while waiting", seat.job_id)
            _leave(seat)
            return None
        if time.monotonic() > deadline:
            with_database_retries(lambda: _give_up(seat, settings), what="abandoning a placement")
            return None
        time.sleep(POLL_S)


def _give_up(seat: Seat, settings: Settings) -> None:
    with session_scope() as session:
        job = JobRepository(session).get_any_tenant(seat.job_id, for_update=True)
        rows = JobNodeRepository(session).placement(seat.job_id)
        if job is None or not rows or rows[0].placement_id != seat.placement_id:
            return
        if job.status == JobStatus.QUEUED.value and rows[0].state == NodeState.WAITING:
            _abandon(session, job, rows, settings)
        else:
            JobNodeRepository(session).drop(job.id)
    logger.warning("job %s: placement timed out; the job is queued again", seat.job_id)


def _leave(seat: Seat) -> None:
    in_transaction(
        lambda session: JobNodeRepository(session).drop(seat.job_id, seat.placement_id),
        what="leaving a placement",
    )


def _open_rendezvous(seat: Seat, take_job: TakeJob) -> Rendezvous | None:
    """Node 0, once everyone joined: take the job and publish where the launchers meet."""
    if not take_job(seat.job_id):
        _leave(seat)  # cancelled meanwhile
        return None
    port = _free_port()

    def publish(session: Session) -> Rendezvous | None:
        nodes = JobNodeRepository(session)
        rows = nodes.placement(seat.job_id)
        if len(rows) != seat.num_nodes or rows[0].placement_id != seat.placement_id:
            return None
        nodes.launch(rows, port)
        workers = ", ".join(f"node {row.node_rank}: {row.worker_id}" for row in rows)
        EventRepository(session).add_event(
            seat.job_id,
            "placed",
            f"placed on {seat.num_nodes} workers ({workers}); they meet at node 0",
            data={"workers": [row.worker_id for row in rows]},
        )
        return Rendezvous(seat.num_nodes, 0, rows[0].address, port)

    return in_transaction(publish, what="opening the rendezvous")


def _free_port() -> int:
    # Free now; torchrun's store binds it a moment later (the same as --standalone does).
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("", 0))
        return int(probe.getsockname()[1])


@dataclass
class NodeRun:
    """What a node's part of a running job needs from its placement: where to meet, and a
    watchdog its launcher calls to learn that the run must stop here."""

    seat: Seat
    rendezvous: Rendezvous
    watch: NodeWatch
    settings: Settings

    def coordinator_watchdog(self) -> None:
        """Node 0: raise NodeLost for a node that stopped beating, TrainingProcessError for
        one whose processes failed."""
        self.watch.raise_for_peers(self.settings.worker_lease_s)

    def follower_watchdog(self) -> None:
        """Node 1 and up: raise NodeLost when the run is over or node 0 is gone."""
        if self.watch.placement_gone():
            raise NodeLost("the job's placement is over (node 0 ended the run)")
        if self.watch.silent_for(0) >= self.settings.worker_lease_s:
            raise NodeLost("node 0 stopped answering")

    def settle(self, failure: TrainingProcessError) -> Exception:
        """Node 0's processes failed: a node that is gone (NodeLost: resume) or failed (its
        reason joins ours) explains it better than our own processes' collateral error."""
        deadline = time.monotonic() + self.settings.worker_lease_s + 2 * self.watch.interval_s
        while time.monotonic() < deadline:
            try:
                self.watch.raise_for_peers(self.settings.worker_lease_s)
            except NodeLost as lost:
                return lost
            except TrainingProcessError as peer:
                return TrainingProcessError(f"node 0: {failure}; {peer}")
            if self.watch.peers_settled():
                break
            time.sleep(POLL_S)
        return failure

    def report_finished(self) -> None:
        """This node's processes exited cleanly (node 1 and up): node 0 reads it."""
        self._report_end(NodeState.FINISHED, None)

    def report_failed(self, reason: str) -> None:
        """This node's processes failed (node 1 and up): node 0 fails the job with ``reason``."""
        self._report_end(NodeState.FAILED, reason)

    def _report_end(self, state: NodeState, detail: str | None) -> None:
        seat = self.seat
        in_transaction(
            lambda session: JobNodeRepository(session).report_end(
                seat.job_id, seat.node_rank, seat.placement_id, state, detail
            ),
            what="reporting a node's end",
        )

    def close(self) -> None:
        """Node 0, its run over: the placement goes (the other nodes stop on seeing that)."""
        _leave(self.seat)

    def requeue(self, lost: NodeLost) -> None:
        """Node 0 lost a node: the job goes back to the queue, to resume from its last
        checkpoint on a fresh placement (unless someone else ended or took it meanwhile)."""
        seat = self.seat
        in_transaction(
            lambda session: ownership.requeue(
                session,
                seat.job_id,
                HeldBy(seat.worker_id),
                kind="node_lost",
                why=str(lost),
                then=f"the job resumes from its last checkpoint once {seat.num_nodes} workers "
                "are free again",
            ),
            what="requeueing a job that lost a node",
        )
        logger.warning("job %s: %s; queued again", seat.job_id, lost)


@dataclass
class NodeWatch:
    """Beats this node's row and reads the placement, from a thread of its own."""

    seat: Seat
    interval_s: float
    _nodes: dict[int, NodeView] = field(default_factory=dict)
    _job_status: str | None = None
    _gone: bool = False
    _rendezvous: Rendezvous | None = None
    _silence: HeartbeatSilence = field(default_factory=HeartbeatSilence)
    _silent: dict[int, float] = field(default_factory=dict)
    _read_once: threading.Event = field(default_factory=threading.Event)
    _stopped: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _thread: threading.Thread | None = None

    def __enter__(self) -> NodeWatch:
        self._thread = threading.Thread(target=self._run, name="node-watch", daemon=True)
        self._thread.start()
        self._read_once.wait(timeout=30)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while True:
            try:
                self._beat_and_read()
            except Exception as exc:  # the database is away: keep the last view, retry
                logger.warning("node watch of %s: %s", self.seat.job_id, exc)
            self._read_once.set()
            if self._stopped.wait(min(self.interval_s, 1.0)):
                return

    def _beat_and_read(self) -> None:
        seat = self.seat
        with session_scope() as session:
            repository = JobNodeRepository(session)
            repository.beat(seat.job_id, seat.node_rank, seat.placement_id)
            rows = repository.placement(seat.job_id, seat.placement_id)
            state = JobRepository(session).status_of(seat.job_id)
            status = state[0] if state is not None else None
            nodes = {
                row.node_rank: NodeView(
                    row.node_rank, row.worker_id, NodeState(row.state), row.detail, row.heartbeat_at
                )
                for row in rows
            }
            first = rows[0] if rows and rows[0].node_rank == 0 else None
            rendezvous = (
                Rendezvous(seat.num_nodes, seat.node_rank, first.address, first.rendezvous_port)
                if first is not None and first.rendezvous_port is not None
                else None
            )
        now = time.monotonic()
        silent = {
            rank: self._silence.silent_for(str(rank), view.heartbeat_at, now)
            for rank, view in nodes.items()
        }
        with self._lock:
            self._nodes = nodes
            self._job_status = status
            self._gone = seat.node_rank not in nodes
            self._rendezvous = rendezvous
            self._silent = silent

    def joined(self) -> int:
        with self._lock:
            return len(self._nodes)

    def job_status(self) -> str | None:
        with self._lock:
            return self._job_status

    def placement_gone(self) -> bool:
        with self._lock:
            return self._gone

    def rendezvous(self) -> Rendezvous | None:
        with self._lock:
            return self._rendezvous

    def silent_for(self, node_rank: int) -> float:
        with self._lock:
            return self._silent.get(node_rank, 0.0)

    def raise_for_peers(self, lease_s: float) -> None:
        with self._lock:
            nodes, silent = dict(self._nodes), dict(self._silent)
        for rank in range(1, self.seat.num_nodes):
            view = nodes.get(rank)
            if view is None:
                raise NodeLost(f"node {rank} left the placement")
            if view.state == NodeState.FAILED:
                raise TrainingProcessError(f"node {rank}: {view.detail}")
            if silent.get(rank, 0.0) < lease_s:
                continue
            if view.state == NodeState.FINISHED:
                # Its ranks ended while ours still run: ours wait on collectives that will
                # never come (seen once, under load: a node's launcher ended its ranks at
                # start). Resuming on a fresh placement beats waiting forever.
                raise NodeLost(
                    f"node {rank}'s processes ended while node 0's went on (for more than "
                    f"{lease_s:.0f} s)"
                )
            raise NodeLost(
                f"node {rank} ({view.worker_id}) stopped answering "
                f"(no heartbeat for {lease_s:.0f} s)"
            )

    def peers_settled(self) -> bool:
        """Every other node said how its processes ended."""
        with self._lock:
            return all(
                view.state.is_settled
                for rank, view in self._nodes.items()
                if rank != self.seat.node_rank
            )
