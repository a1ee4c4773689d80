"""Leases: how a worker holds a row it works on (a job, an export), and the state machines
those rows move through. One implementation; each kind of row specialises it with a
``LeasePolicy`` (as Prefect's orchestration rules specialise one state machine per run type).

A held row carries its worker's id and a heartbeat. Every move on it, in the caller's
transaction:

1. reads the row FOR UPDATE (``LeasePolicy.hold``);
2. checks the claim: the worker still holds it (``HeldBy``), or, for the lost-worker reaper,
   the heartbeat it saw expire is still the latest (``ExpiredLease``) - a row someone else
   ended, paused or took over meanwhile is left as it is;
3. moves the status through the row's ``StateMachine``;
4. queues the row again once the transaction commits, where the move sends it back.

The moves themselves (take, release, requeue, finish, fail) are the domain's:
service.jobs.ownership and service.exports.ownership.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Generic, Protocol, TypeVar

from sqlalchemy.orm import Session

from service.errors import IllegalTransition


class Leased(Protocol):
    """A row a worker holds under a lease."""

    @property
    def status(self) -> str: ...

    @property
    def worker_id(self) -> str | None: ...

    @property
    def heartbeat_at(self) -> datetime | None: ...


@dataclass(frozen=True)
class HeldBy:
    """The worker that holds the row asks."""

    worker_id: str

    def holds(self, row: Leased) -> bool:
        return row.worker_id == self.worker_id


@dataclass(frozen=True)
class ExpiredLease:
    """The reaper asks, about a lease whose heartbeat it saw stand still for a whole lease."""

    heartbeat_at: datetime | None

    def holds(self, row: Leased) -> bool:
        # The owner may have beaten (or finished) since the reaper looked.
        return row.heartbeat_at == self.heartbeat_at


Claim = HeldBy | ExpiredLease

Status = TypeVar("Status", bound=StrEnum)


@dataclass(frozen=True)
class StateMachine(Generic[Status]):
    """Every allowed move of one kind of row, listed once (``transitions``)."""

    noun: str  # what the row is called in an error: "job", "export", "node"
    transitions: Mapping[Status, frozenset[Status]]

    def allows(self, current: Status, target: Status) -> bool:
        return target in self.transitions[current]

    def ensure(self, row_id: object, current: Status, target: Status) -> None:
        """Raise IllegalTransition (409) naming the row unless ``current -> target`` is allowed."""
        if not self.allows(current, target):
            raise IllegalTransition(
                f"{self.noun} {row_id} is {current.value}; it cannot become {target.value}"
            )


Row = TypeVar("Row", bound=Leased)


@dataclass(frozen=True)
class LeasePolicy(Generic[Row]):
    """What differs between the kinds of rows a worker leases."""

    # Reads one row FOR UPDATE (None: gone).
    load_for_update: Callable[[Session, str], Row | None]
    # The statuses in which a worker holds the row (its lease is live).
    holding: frozenset[str]

    def hold(self, session: Session, row_id: str, claim: Claim) -> Row | None:
        """The row, locked, while ``claim`` holds it; None when it is gone, held by no one
        (its status stands: ended, paused, cancelled) or held under another claim."""
        row = self.load_for_update(session, row_id)
        if row is None or row.status not in self.holding or not claim.holds(row):
            return None
        return row


class Leasable(Protocol):
    """A row as a lease starts: its holder and heartbeat are written."""

    worker_id: str | None
    heartbeat_at: datetime | None


def start_lease(row: Leasable, worker_id: str) -> datetime:
    """``worker_id`` holds ``row`` from now (the caller moved it to a holding status)."""
    now = datetime.now(UTC)
    row.worker_id = worker_id
    row.heartbeat_at = now
    return now
