"""How reward-function processes are isolated and limited."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from sandbox.egress import HostRule

Isolation = Literal["bwrap", "none"]
CgroupMode = Literal["auto", "require", "off"]
MAX_UID = 2**32 - 2  # (uid_t)-1 means "unchanged" to setuid
# Environment variables the sandbox sets itself; a job's environment cannot override them.
RESERVED_ENV = frozenset(
    {"PATH", "HOME", "LANG", "LD_LIBRARY_PATH", "LD_PRELOAD", "PYTHONPATH", "PYTHONHOME"}
)


@dataclass
class SandboxSettings:
    """Settings of one job's reward sandbox. Invalid values are rejected at construction."""

    isolation: Isolation = field(
        default="bwrap",
        metadata={
            "help": "'bwrap': bubblewrap namespaces, a read-only minimal filesystem and an "
            "unprivileged uid. 'none': a plain child process, for development only; it logs a "
            "warning every time a sandbox starts."
        },
    )
    allow_network: bool = field(
        default=False,
        metadata={
            "help": "Give the code a way out through the egress proxy (sandbox/egress.py): "
            "HTTP(S) to public addresses only. The sandbox never shares the host's network "
            "namespace, with or without it (bwrap only)."
        },
    )
    egress_allowed_hosts: list[str] = field(
        default_factory=list,
        metadata={
            "help": "Deployment setting, never a job's: internal hosts ('host' or "
            "'host:port') that networked code may reach although their addresses are private "
            "(an internal judge, a tool service)."
        },
    )
    egress_deployment_hosts: list[str] = field(
        default_factory=list,
        metadata={
            "help": "The deployment's own hosts (database, Redis, inference server, API): "
            "refused by name and by address, on every port, even at a public address."
        },
    )
    egress_only_hosts: list[str] = field(
        default_factory=list,
        metadata={
            "help": "A job's own narrowing of the way out: when non-empty, networked code may "
            "reach only these hosts ('host' or 'host:port'; its HTTP tools and endpoint "
            "grader), each still under the address checks."
        },
    )
    egress_denied_networks: list[str] = field(
        default_factory=list,
        metadata={
            "help": "Networks (CIDR) refused beside the built-in private, loopback, "
            "link-local and reserved ranges: a deployment whose internal network uses "
            "other addresses lists them here."
        },
    )
    env: dict[str, str] = field(
        default_factory=dict,
        metadata={
            "help": "The job's own environment (its secrets). The child sees only these plus "
            "PATH (the sandbox's python first), LANG, HOME=/tmp, PYTHONPATH (the job's "
            "packages) and one-thread defaults for OpenMP/BLAS (the job may set them); "
            "nothing of the worker's environment leaks in."
        },
    )
    extra_python_paths: list[Path] = field(
        default_factory=list,
        metadata={
            "help": "The job's package directories, put first on sys.path (read-only), and on "
            "PYTHONPATH for the Python processes the code starts."
        },
    )
    memory_limit_mb: int = field(
        default=1024, metadata={"help": "Address-space limit (RLIMIT_AS) of the child, MiB."}
    )
    cpu_time_limit_s: int = field(
        default=600,
        metadata={
            "help": "RLIMIT_CPU of each child process. A warm child is replaced once it has "
            "used 80% of this, so the limit only fires on runaway processes."
        },
    )
    max_processes: int = field(
        default=64,
        metadata={
            "help": "RLIMIT_NPROC (bwrap only: it counts every process of the sandbox uid, and "
            "in 'none' mode it would count the worker's own threads)."
        },
    )
    max_open_files: int = field(default=256, metadata={"help": "RLIMIT_NOFILE of the child."})
    cgroups: CgroupMode = field(
        default="auto",
        metadata={
            "help": "Put each sandbox process tree in a cgroup of its own with memory.max = "
            "memory_limit_mb and pids.max = cgroup_pids_max, counted over the whole tree. "
            "'auto': where the host offers writable memory and pids cgroups (v1 or v2), else "
            "rlimits only (logged once); 'require': refuse to start without them; 'off'."
        },
    )
    cgroup_pids_max: int = field(
        default=64,
        metadata={
            "help": "pids.max of the sandbox's cgroup: processes and threads of the whole "
            "tree, bubblewrap's two included."
        },
    )
    tmp_size_mb: int = field(
        default=64,
        metadata={"help": "Size of the sandbox's private /tmp, and the largest file it may write."},
    )
    call_timeout_s: float = field(
        default=30.0,
        metadata={
            "help": "Wall-clock limit of one function scoring one batch (and of loading, unless "
            "load_timeout_s is set). The child interrupts the call at this time; the parent "
            "kills it shortly after."
        },
    )
    load_timeout_s: float | None = field(
        default=None,
        metadata={
            "help": "Wall-clock limit of loading the functions (their module-level code, "
            "imports included). None: call_timeout_s."
        },
    )
    sample_timeout_s: float = field(
        default=10.0,
        metadata={
            "help": "Wall-clock limit of one sample of a per-sample function (capped by "
            "call_timeout_s): a sample over it loses only its own score. A function may set "
            "its own."
        },
    )
    kill_grace_s: float = field(
        default=0.5,
        metadata={"help": "How long after call_timeout_s the parent waits before SIGKILL."},
    )
    start_timeout_s: float = field(
        default=15.0, metadata={"help": "How long a new child may take to say it is ready."}
    )
    log_limit_bytes: int = field(
        default=64 * 1024,
        metadata={"help": "Output kept per function per batch (counted in characters)."},
    )
    workers: int = field(
        default=1,
        metadata={
            "help": "Warm child processes; functions are spread over them and run in parallel."
        },
    )
    sandbox_uid: int | None = field(
        default=None,
        metadata={
            "help": "Host uid (and gid) the code runs as when the worker is root. None: each "
            "sandbox leases a uid of its own from the range below for its lifetime, so "
            "RLIMIT_NPROC (counted per uid, host-wide) is per sandbox, not shared by all jobs."
        },
    )
    uid_range_first: int = field(
        default=61000,
        metadata={
            "help": "First uid sandboxes lease from. Inside 0-65535 so that it also works "
            "in containers whose user namespace maps only 65536 ids."
        },
    )
    uid_range_count: int = field(
        default=4000, metadata={"help": "How many uids sandboxes lease from (open at once)."}
    )
    uid_lock_dir: Path | None = field(
        default=None,
        metadata={
            "help": "Where uid leases are locked (default: <tmp>/rft-sandbox-uids). Workers "
            "sharing a host must share it (or use disjoint ranges)."
        },
    )
    python_prefix: Path | None = field(
        default=None,
        metadata={"help": "Interpreter installation to run; default: the worker's own (base)."},
    )

    @property
    def effective_load_timeout_s(self) -> float:
        return self.load_timeout_s if self.load_timeout_s is not None else self.call_timeout_s

    def __post_init__(self) -> None:
        if self.isolation not in ("bwrap", "none"):
            raise ValueError(f"isolation must be 'bwrap' or 'none', not {self.isolation!r}")
        if self.cgroups not in ("auto", "require", "off"):
            raise ValueError(f"cgroups must be 'auto', 'require' or 'off', not {self.cgroups!r}")
        if self.allow_network and self.isolation == "none":
            raise ValueError("allow_network only applies to isolation='bwrap'; drop it for 'none'")
        self.extra_python_paths = [Path(path).resolve() for path in self.extra_python_paths]
        _check_egress_entries(self)
        if self.python_prefix is not None:
            self.python_prefix = Path(self.python_prefix)
        for path in self.extra_python_paths:
            if not path.is_dir():
                raise ValueError(f"extra_python_paths: {path} is not a directory")
        positive = {
            "memory_limit_mb": self.memory_limit_mb,
            "cpu_time_limit_s": self.cpu_time_limit_s,
            "max_processes": self.max_processes,
            "max_open_files": self.max_open_files,
            "tmp_size_mb": self.tmp_size_mb,
            "call_timeout_s": self.call_timeout_s,
            "sample_timeout_s": self.sample_timeout_s,
            "start_timeout_s": self.start_timeout_s,
            "workers": self.workers,
            "uid_range_count": self.uid_range_count,
        }
        for name, value in positive.items():
            if value <= 0:
                raise ValueError(f"{name} must be positive, got {value}")
        if self.max_open_files < 16:
            raise ValueError("max_open_files below 16 leaves the interpreter unable to start")
        if self.cgroup_pids_max < 8:
            raise ValueError("cgroup_pids_max below 8 leaves the sandbox unable to start")
        if self.memory_limit_mb < 64:
            raise ValueError("memory_limit_mb below 64 leaves the interpreter unable to start")
        uids = (self.uid_range_first, self.uid_range_first + self.uid_range_count - 1)
        if self.sandbox_uid is not None:
            uids = (self.sandbox_uid, self.sandbox_uid)
        if uids[0] < 1 or uids[1] > MAX_UID:
            raise ValueError(f"sandbox uids {uids[0]}-{uids[1]} must lie within 1-{MAX_UID}")
        if self.load_timeout_s is not None and self.load_timeout_s <= 0:
            raise ValueError(f"load_timeout_s must be positive, got {self.load_timeout_s}")
        if self.log_limit_bytes < 0 or self.kill_grace_s < 0:
            raise ValueError("log_limit_bytes and kill_grace_s cannot be negative")
        clashes = RESERVED_ENV & set(self.env)
        if clashes:
            raise ValueError(f"env cannot set {sorted(clashes)}: the sandbox controls them")


def _check_egress_entries(settings: SandboxSettings) -> None:
    for name in ("egress_allowed_hosts", "egress_deployment_hosts", "egress_only_hosts"):
        for entry in getattr(settings, name):
            try:
                HostRule.parse(entry)
            except ValueError as error:
                raise ValueError(f"{name}: {error}") from None
    for entry in settings.egress_denied_networks:
        try:
            ipaddress.ip_network(entry.strip(), strict=False)
        except ValueError as error:
            raise ValueError(f"egress_denied_networks: {error}") from None
