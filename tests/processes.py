"""The processes a test starts, read from /proc: a worker's training launcher and ranks, and
whether any is still alive (nothing may outlive a job)."""

from __future__ import annotations

import os
import time
from pathlib import Path


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/PID/stat's fields from the state on (field 3), or None if ``pid`` is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name may hold spaces or parentheses: the fields after its last ')' are fixed.
    return stat.rsplit(")", 1)[1].split()


def parent_of(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[1]) if fields else None


def started_at(pid: int) -> int:
    """When ``pid`` started, in clock ticks since boot (0 if it is gone)."""
    fields = _stat_fields(pid)
    return int(fields[19]) if fields else 0


def command_of(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def descendants(root: int) -> set[int]:
    """Every process below ``root`` (children, their children, ...)."""
    parents = {int(name): parent_of(int(name)) for name in os.listdir("/proc") if name.isdigit()}
    found: set[int] = set()
    frontier = {root}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def training_processes(root: int, *, spares: bool = False) -> dict[int, str]:
    """The training launcher and ranks descending from ``root``: pid -> command line.

    Every worker keeps a warm spare for 1-device jobs; it is listed only with ``spares``. The
    spare template (where spares are forked) trains nothing and is never listed; its forked
    spares carry its command line, and it is their parent."""
    found: dict[int, str] = {}
    for pid in descendants(root):
        command = command_of(pid)
        if "workers.training.spare" in command and not spares:
            continue
        if is_spare_template(pid, command):
            continue
        if any(
            module in command
            for module in (
                "workers.training.rank_process",
                "workers.training.spare",
                "torch.distributed.run",
            )
        ):
            found[pid] = command
    return found


def is_spare_template(pid: int, command: str | None = None) -> bool:
    """Whether ``pid`` is a worker's spare template (not a spare it forked)."""
    template = "workers.training.spare_template"
    parent = parent_of(pid)
    return template in (command or command_of(pid)) and (
        parent is None or template not in command_of(parent)
    )


def rank_pids(root: int) -> dict[int, int]:
    """Rank number -> pid of the ranks under ``root`` (a rank's environment names its RANK)."""
    ranks: dict[int, int] = {}
    for pid, command in training_processes(root).items():
        if "torch.distributed.run" in command:
            continue
        try:
            environment = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        for entry in environment:
            if entry.startswith(b"RANK="):
                ranks[int(entry[5:])] = pid
    return ranks


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def wait_gone(pids: list[int], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not any(alive(pid) for pid in pids):
            return
        time.sleep(0.2)
    left = {pid: command_of(pid) for pid in pids if alive(pid)}
    raise AssertionError(f"training processes still running: {left}")
