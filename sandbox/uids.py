"""A host uid of its own for every open sandbox, so per-uid kernel limits are per sandbox.

RLIMIT_NPROC counts every process of a uid on the whole host. With one uid shared by all
sandboxes, one job's reward code holding its process quota would stop every other job's
sandbox from starting (execve fails with EAGAIN once the uid is over its limit): one tenant
could deny service to the others. So each sandbox leases a uid for its lifetime.

A lease is an exclusive flock() on a file named after the uid: it holds across every worker
process that shares the lock directory, and the kernel drops it when its holder dies, so a
killed worker never strands a uid. Workers in separate containers on one host need a shared
lock directory (a volume) or disjoint uid ranges.
"""

from __future__ import annotations

import errno
import fcntl
import os
import random
from pathlib import Path


class NoFreeUidError(RuntimeError):
    """Every uid of the range is leased by an open sandbox."""


class UidLease:
    """One uid, held until release() (or until the holding process exits)."""

    def __init__(self, uid: int, lock_fd: int) -> None:
        self.uid = uid
        self._lock_fd: int | None = lock_fd

    def release(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing the descriptor drops the flock
            self._lock_fd = None

    @property
    def held(self) -> bool:
        return self._lock_fd is not None


def lease_uid(first: int, count: int, lock_dir: Path) -> UidLease:
    """Lease a uid in [first, first + count) that no other open sandbox holds.

    The search starts at a random uid: a uid given back a moment ago may still have processes
    the kernel is reaping (they count against RLIMIT_NPROC), so it is the last one to reuse.
    """
    lock_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    start = random.randrange(count)
    for offset in range(count):
        uid = first + (start + offset) % count
        fd = os.open(lock_dir / f"{uid}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            os.close(fd)
            if error.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                continue
            raise
        return UidLease(uid, fd)
    raise NoFreeUidError(
        f"all {count} sandbox uids from {first} are in use; raise the range "
        "(RFT_SANDBOX_UID_COUNT) or run fewer sandboxes at once"
    )
