"""A thread's CPU priority as Linux keeps it (per thread: scheduling policy and nice), and the
moves the spare and the worker make with it (workers.training.spare, "The spare's priority")."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from dataclasses import dataclass


@dataclass(frozen=True)
class ThreadPriority:
    """A thread's CPU priority as Linux keeps it (per thread): scheduling policy and nice."""

    policy: int
    nice: int
    rt_priority: int = 0

    @classmethod
    def of(cls, tid: int) -> ThreadPriority:
        return cls(
            os.sched_getscheduler(tid),
            os.getpriority(os.PRIO_PROCESS, tid),
            os.sched_getparam(tid).sched_priority,
        )

    def apply(self, tid: int) -> None:
        """Give thread ``tid`` this priority; PermissionError where raising it is not allowed."""
        if self.policy == getattr(os, "SCHED_IDLE", None):  # lowering: nice first, then idle
            os.setpriority(os.PRIO_PROCESS, tid, self.nice)
            os.sched_setscheduler(tid, self.policy, os.sched_param(self.rt_priority))
        else:  # raising: the policy (out of SCHED_IDLE), then nice
            os.sched_setscheduler(tid, self.policy, os.sched_param(self.rt_priority))
            os.setpriority(os.PRIO_PROCESS, tid, self.nice)


def lowest_priority() -> ThreadPriority:
    return ThreadPriority(os.SCHED_IDLE, 19)


def can_lower_threads() -> bool:
    """Linux only: elsewhere nice applies to the whole process, and the job would keep it."""
    return sys.platform.startswith("linux") and hasattr(os, "SCHED_IDLE")


def thread_priorities(pid: int) -> dict[int, ThreadPriority]:
    """Every thread of process ``pid`` (its main thread's id is ``pid``) and its priority."""
    found = {}
    for name in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError):  # a thread that just ended
            found[int(name)] = ThreadPriority.of(int(name))
    return found


def lowered_threads(pid: int) -> list[int]:
    """The threads of process ``pid`` whose priority is not its main thread's."""
    threads = thread_priorities(pid)
    normal = threads.pop(pid, None)
    return [tid for tid, priority in threads.items() if normal is not None and priority != normal]


def raise_lowered_threads(pid: int) -> list[int]:
    """Give every thread of ``pid`` below its main thread's priority that priority again (as
    far as this process is allowed); the threads left lower."""
    normal = ThreadPriority.of(pid)
    left = []
    for tid in lowered_threads(pid):
        try:
            normal.apply(tid)
        except PermissionError:
            left.append(tid)
        except OSError:  # ProcessLookupError: it ended
            pass
    return left


def may_raise_priority() -> bool:
    """Whether this process may raise a thread from the lowest priority back to its own
    (CAP_SYS_NICE, or RLIMIT_NICE): tried on a throwaway thread."""
    normal = ThreadPriority.of(threading.get_native_id())
    allowed: list[bool] = []

    def probe() -> None:
        tid = threading.get_native_id()
        try:
            lowest_priority().apply(tid)
            normal.apply(tid)
            allowed.append(True)
        except OSError:
            allowed.append(False)

    thread = threading.Thread(target=probe, name="spare-priority-probe")
    thread.start()
    thread.join()
    return allowed == [True]
