"""A cgroup of its own, with memory and pids limits, for every sandbox process tree.

The rlimits the child sets count per process (RLIMIT_AS) or per uid (RLIMIT_NPROC); a cgroup
counts the whole tree: reward code that forks eight children of 1 GiB address space each
would pass every rlimit and still take 8 GiB of the worker's memory. So, where the host
offers the memory and pids controllers, the parent (root) creates a cgroup for each child it
starts, sets memory.limit_in_bytes / memory.max to the reward memory limit and pids.max to
the process limit, and starts bubblewrap already inside it (a tiny /bin/sh joins the cgroup
and execs bwrap, so not one instruction of the tree runs outside; Popen's preexec_fn would do
the same but is unsafe in a threaded worker). Every process bwrap starts inherits the cgroup.
When the child ends the cgroup is emptied and removed.

Layout: directly under this process's own cgroup (from /proc/self/cgroup) in each
controller's hierarchy, <own>/rft-sandbox-<worker pid>-<n>: the limits of the cgroup the
worker runs in (a container's, a service's) still bound every sandbox, and nothing of ours
stays there once the sandboxes are gone (a directory left in the worker's cgroup would keep
whoever manages that cgroup from removing it). cgroup v1 (memory and pids hierarchies, as
on this machine) and v2 (one unified hierarchy whose cgroup.controllers offers memory and
pids, and whose own cgroup can delegate them) are both handled. Only a worker killed outright
(SIGKILL) leaves its sandbox cgroups behind, empty; the next worker in the same cgroup that
starts a sandbox removes them.

Inside the sandbox the cgroup namespace is unshared and /sys is not mounted, so the code can
neither see nor leave its cgroup; the unprivileged uid could not write to it anyway.

Where cgroups are not writable (a non-root worker, a container without delegation) the
sandbox relies on rlimits alone; settings.cgroups decides whether that is fine ('auto', which
logs it once), an error ('require'), or not even tried ('off').
"""

from __future__ import annotations

import contextlib
import errno
import functools
import itertools
import logging
import os
import re
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from sandbox.settings import CgroupMode

logger = logging.getLogger(__name__)

SANDBOX_CGROUP_PREFIX = "rft-sandbox-"
CONTROLLERS = ("memory", "pids")
# How long remove() keeps killing and retrying before it leaves the cgroup to a later sweep.
REMOVE_ATTEMPTS = 20
REMOVE_PAUSE_S = 0.005
# /bin/sh joins every cgroup.procs named before "--", then becomes the command after it.
JOIN_SCRIPT = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; exec "$@"'


class CgroupUnavailableError(RuntimeError):
    """The host offers no writable memory and pids cgroups to this process."""


@dataclass(frozen=True)
class CgroupLimits:
    memory_bytes: int
    pids: int


@dataclass(frozen=True)
class CgroupCounters:
    """What the limits did to the tree so far (read from the parent's side)."""

    oom_kills: int  # processes of the tree killed by the OOM killer
    pids_refused: int  # forks refused at pids.max
    memory_peak_bytes: int | None


@dataclass(frozen=True)
class CgroupHost:
    """Where this process creates sandbox cgroups: a parent directory per hierarchy."""

    version: Literal[1, 2]
    parents: dict[str, Path]  # controller -> our own cgroup (one directory on v2)

    @property
    def directories(self) -> list[Path]:
        return sorted(set(self.parents.values()))


@dataclass(frozen=True)
class CgroupSupport:
    host: CgroupHost | None
    reason: str


class SandboxCgroup:
    """One sandbox tree's cgroup (a directory per hierarchy), from creation to removal."""

    _sequence = itertools.count()

    def __init__(self, host: CgroupHost, name: str) -> None:
        self.host = host
        self.name = name
        self.directories = [parent / name for parent in host.directories]

    @classmethod
    def create(cls, host: CgroupHost, limits: CgroupLimits) -> SandboxCgroup:
        """Create the cgroup with `limits` set; OSError if the kernel refuses any of it."""
        _retry_pending_removals()
        while True:
            cgroup = cls(host, f"{SANDBOX_CGROUP_PREFIX}{os.getpid()}-{next(cls._sequence)}")
            try:
                cgroup.directories[0].mkdir()
            except FileExistsError:
                continue  # left by a dead worker that had our pid; the sweep takes it later
            break
        try:
            for directory in cgroup.directories[1:]:
                directory.mkdir(exist_ok=True)
            cgroup._set_limits(limits)
        except BaseException:
            cgroup.remove()
            raise
        return cgroup

    def _directory(self, controller: str) -> Path:
        return self.host.parents[controller] / self.name

    def _set_limits(self, limits: CgroupLimits) -> None:
        memory = self._directory("memory")
        if self.host.version == 1:
            _write(memory / "memory.limit_in_bytes", limits.memory_bytes)
            # With swap accounting, memory+swap gets the same limit: the tree cannot swap out
            # past it. (Without it the file is absent.)
            if (memory / "memory.memsw.limit_in_bytes").exists():
                _write(memory / "memory.memsw.limit_in_bytes", limits.memory_bytes)
        else:
            _write(memory / "memory.max", limits.memory_bytes)
            if (memory / "memory.swap.max").exists():
                _write(memory / "memory.swap.max", 0)
        _write(self._directory("pids") / "pids.max", limits.pids)

    @property
    def procs_files(self) -> list[Path]:
        return [directory / "cgroup.procs" for directory in self.directories]

    def wrap(self, argv: list[str]) -> list[str]:
        """`argv`, started inside this cgroup."""
        procs = [str(path) for path in self.procs_files]
        return ["/bin/sh", "-c", JOIN_SCRIPT, "rft-cgroup-join", *procs, "--", *argv]

    def counters(self) -> CgroupCounters:
        memory, pids = self._directory("memory"), self._directory("pids")
        pids_refused = _read_keyed(pids / "pids.events").get("max", 0)
        if self.host.version == 1:
            return CgroupCounters(
                oom_kills=_read_keyed(memory / "memory.oom_control").get("oom_kill", 0),
                pids_refused=pids_refused,
                memory_peak_bytes=_read_int(memory / "memory.max_usage_in_bytes"),
            )
        return CgroupCounters(
            oom_kills=_read_keyed(memory / "memory.events").get("oom_kill", 0),
            pids_refused=pids_refused,
            memory_peak_bytes=_read_int(memory / "memory.peak"),
        )

    def pids(self) -> set[int]:
        found: set[int] = set()
        for path in self.procs_files:
            with contextlib.suppress(OSError):
                found.update(int(line) for line in path.read_text().split())
        return found

    def remove(self) -> None:
        """Kill whatever is left in the cgroup and remove it (later, if the kernel is slow)."""
        for attempt in range(REMOVE_ATTEMPTS):
            if _remove_directories(self.directories):
                return
            # Normally empty by now (the pid namespace died with its init). Leftovers exist
            # only without bwrap; a cgroup lists them all, however they detached.
            self._kill_members()
            if attempt:
                time.sleep(REMOVE_PAUSE_S)
        with _pending_lock:
            _pending_removals.extend(self.directories)

    def _kill_members(self) -> None:
        kill_file = self._directory("pids") / "cgroup.kill"  # v2, Linux 5.14+: atomic
        if self.host.version == 2 and kill_file.exists():
            with contextlib.suppress(OSError):
                _write(kill_file, 1)
            return
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _write(path: Path, value: int) -> None:
    with open(path, "w") as handle:
        handle.write(str(value))


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _read_keyed(path: Path) -> dict[str, int]:
    """A "key value" per line file (pids.events, memory.events, memory.oom_control)."""
    values: dict[str, int] = {}
    with contextlib.suppress(OSError):
        for line in path.read_text().splitlines():
            key, _, value = line.partition(" ")
            if value.strip().isdigit():
                values[key] = int(value)
    return values


def _remove_directories(directories: list[Path]) -> bool:
    removed = True
    for directory in directories:
        try:
            directory.rmdir()
        except FileNotFoundError:
            pass
        except OSError as error:
            if error.errno != errno.EBUSY:
                logger.warning("cannot remove sandbox cgroup %s: %s", directory, error)
            removed = False
    return removed


_pending_lock = threading.Lock()
_pending_removals: list[Path] = []


def _retry_pending_removals() -> None:
    with _pending_lock:
        if _pending_removals:
            still = [path for path in _pending_removals if not _remove_directories([path])]
            _pending_removals[:] = still


def _unescape_mount_path(text: str) -> str:
    # mountinfo writes space, tab, newline and backslash as \ooo octal escapes.
    return re.sub(r"\\([0-7]{3})", lambda match: chr(int(match.group(1), 8)), text)


def _cgroup_mounts(mountinfo: str) -> list[tuple[str, set[str], Path, str]]:
    """(fstype, super options, mount point, root inside the hierarchy) of each cgroup mount."""
    mounts = []
    for line in mountinfo.splitlines():
        before, _, after = line.partition(" - ")
        fields, tail = before.split(), after.split()
        if len(fields) < 5 or len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
            continue
        root, mount_point = _unescape_mount_path(fields[3]), _unescape_mount_path(fields[4])
        mounts.append((tail[0], set(tail[2].split(",")), Path(mount_point), root))
    return mounts


def _own_cgroups(proc_cgroup: str) -> dict[str, str]:
    """This process's cgroup path per v1 controller, and under "" its v2 path."""
    paths: dict[str, str] = {}
    for line in proc_cgroup.splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            paths[controller] = path
    return paths


def _inside(mount_point: Path, mount_root: str, path: str) -> Path | None:
    """Where cgroup `path` appears under a mount of the hierarchy at `mount_root`."""
    relative = os.path.relpath(path, mount_root)
    if relative.startswith(".."):
        return None  # our cgroup is not visible through this mount
    return (mount_point / relative).resolve()


def find_own_cgroups(mountinfo: str, proc_cgroup: str) -> tuple[Literal[1, 2], dict[str, Path]]:
    """A process's cgroup directory per controller, from its /proc/<pid>/mountinfo and
    /proc/<pid>/cgroup; CgroupUnavailableError if no hierarchy offers both controllers."""
    mounts = _cgroup_mounts(mountinfo)
    own = _own_cgroups(proc_cgroup)
    found: dict[str, Path] = {}
    for controller in CONTROLLERS:
        for fstype, options, mount_point, root in mounts:
            if fstype == "cgroup" and controller in options and controller in own:
                directory = _inside(mount_point, root, own[controller])
                if directory is not None:
                    found[controller] = directory
                    break
    if len(found) == len(CONTROLLERS):
        return 1, found
    for fstype, _, mount_point, root in mounts:
        if fstype != "cgroup2" or "" not in own:
            continue
        directory = _inside(mount_point, root, own[""])
        if directory is None:
            continue
        try:
            offered = (directory / "cgroup.controllers").read_text().split()
        except OSError:
            continue
        missing = [controller for controller in CONTROLLERS if controller not in offered]
        if missing:
            raise CgroupUnavailableError(
                f"the cgroup v2 hierarchy at {mount_point} does not offer {', '.join(missing)} "
                f"to {directory} (and no cgroup v1 hierarchy has it)"
            )
        return 2, {controller: directory for controller in CONTROLLERS}
    absent = [controller for controller in CONTROLLERS if controller not in found]
    raise CgroupUnavailableError(f"no mounted cgroup hierarchy offers {', '.join(absent)}")


def _delegate_v2(own: Path) -> None:
    """Enable memory and pids for the cgroups under `own` (our own cgroup)."""
    enabled = (own / "cgroup.subtree_control").read_text().split()
    if all(controller in enabled for controller in CONTROLLERS):
        return
    try:
        _write_text(own / "cgroup.subtree_control", " ".join(f"+{name}" for name in CONTROLLERS))
    except OSError as error:
        hint = ""
        if error.errno == errno.EBUSY:
            # Sandbox cgroups beside the worker's (under a delegated parent) would lift this;
            # not done yet.
            hint = (
                f" ({own} holds processes, and cgroup v2 lets such a cgroup hand no controller "
                "to its children; only the root cgroup is exempt)"
            )
        raise CgroupUnavailableError(
            f"cannot enable memory and pids in {own}: {error}{hint}"
        ) from None


def _write_text(path: Path, text: str) -> None:
    with open(path, "w") as handle:
        handle.write(text)


def _sweep_stale(host: CgroupHost) -> None:
    """Remove sandbox cgroups whose worker process no longer exists (it was killed)."""
    for parent in host.directories:
        with contextlib.suppress(OSError):
            for entry in parent.glob(f"{SANDBOX_CGROUP_PREFIX}*"):
                owner = entry.name.removeprefix(SANDBOX_CGROUP_PREFIX).partition("-")[0]
                if entry.is_dir() and owner.isdigit() and not _alive(int(owner)):
                    with contextlib.suppress(OSError):
                        entry.rmdir()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@functools.cache
def detect_cgroups() -> CgroupSupport:
    """Whether sandbox cgroups can be made here (tried once per process, with a probe)."""
    try:
        version, own = find_own_cgroups(
            Path("/proc/self/mountinfo").read_text(), Path("/proc/self/cgroup").read_text()
        )
        if version == 2:
            _delegate_v2(own["memory"])
        host = CgroupHost(version=version, parents=own)
        _sweep_stale(host)
        probe = SandboxCgroup.create(host, CgroupLimits(memory_bytes=64 << 20, pids=8))
        probe.remove()
    except CgroupUnavailableError as error:
        return CgroupSupport(None, str(error))
    except OSError as error:
        reason = f"cgroups are not writable here ({error})"
        if os.geteuid() != 0:
            reason += "; a non-root worker needs a delegated cgroup"
        return CgroupSupport(None, reason)
    directories = ", ".join(str(path) for path in host.directories)
    return CgroupSupport(host, f"cgroup v{version} memory and pids limits under {directories}")


_fallback_logged = False


def cgroup_host_for(mode: CgroupMode) -> CgroupHost | None:
    """Where to create sandbox cgroups under `mode`; None means rlimits only.

    'require' raises CgroupUnavailableError when the host has none; 'auto' logs that once.
    """
    global _fallback_logged
    if mode == "off":
        return None
    support = detect_cgroups()
    if support.host is None:
        if mode == "require":
            raise CgroupUnavailableError(
                f"sandbox cgroups are required (cgroups='require') but unavailable: "
                f"{support.reason}"
            )
        if not _fallback_logged:
            _fallback_logged = True
            logger.warning(
                "reward sandboxes run without cgroup limits (rlimits only): %s", support.reason
            )
    return support.host
