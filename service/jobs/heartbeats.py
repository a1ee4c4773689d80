"""How long a job's heartbeat has stood still, measured by the reader's own clock.

Heartbeats are written with the worker's clock; comparing them with another machine's clock
would turn clock skew into false "lost worker" verdicts. Readers only watch whether the value
changes, and time its silence with their own monotonic clock.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime


@dataclass
class HeartbeatSilence:
    # job id -> (heartbeat value seen, when we first saw that value, by our clock)
    _seen: dict[str, tuple[datetime | None, float]] = field(default_factory=dict)

    def silent_for(self, job_id: str, heartbeat: datetime | None, now: float) -> float:
        """Seconds since ``heartbeat`` was first seen unchanged (0 when it just changed)."""
        seen = self._seen.get(job_id)
        if seen is None or seen[0] != heartbeat:
            self._seen[job_id] = (heartbeat, now)
            return 0.0
        return now - seen[1]

    def forget(self, job_id: str) -> None:
        self._seen.pop(job_id, None)

    def keep_only(self, job_ids: Iterable[str]) -> None:
        wanted = set(job_ids)
        for job_id in [job_id for job_id in self._seen if job_id not in wanted]:
            del self._seen[job_id]
