"""Reward code against the kernel-side limits: the seccomp filter and the cgroup limits.

Every attack runs twice where that is safe: in the sandbox, where it must be refused, and in a
control where the layer under test is absent (a plain child as root without the filter, or the
sandbox with cgroups='off'), where it must get further. A test that passed both ways would
prove nothing.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import platform
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox import cgroups
from sandbox.api import FunctionResult, RewardErrorKind, RewardFunctionSpec, ScoringBatch
from sandbox.isolation import SandboxUnavailableError, detect_isolation
from sandbox.reward_host import ProcessSandbox
from sandbox.seccomp import ARCHITECTURES
from sandbox.settings import CgroupMode, Isolation, SandboxSettings
from tests.layers import needs_layer, skip_missing_layer

BWRAP = detect_isolation()
CGROUPS = cgroups.detect_cgroups()
# The cgroup tests hold without bubblewrap too (the tree's cgroup does not depend on it).
ISOLATION: Isolation = "bwrap" if BWRAP else "none"
needs_bwrap = needs_layer(BWRAP, f"bubblewrap is not usable here: {BWRAP.reason}")
needs_cgroups = needs_layer(
    CGROUPS.host is not None, f"the host offers no sandbox cgroups: {CGROUPS.reason}"
)
needs_root = needs_layer(
    os.geteuid() == 0, "the unfiltered control runs the probes with root's privileges"
)

# Each probe makes one refused call in a forked child, with arguments chosen so that, were the
# call allowed, it would fail harmlessly (a missing path, an invalid time, a bad descriptor) or
# affect only that child (a user namespace, a persona, its own process keyring). The child's
# exit code is the errno (0: the call succeeded).
SYSCALL_PROBE = r'''
import ctypes, json, os, signal, time

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
L = ctypes.c_long
MISSING = b"/tmp/rft-missing-dir/x"


class Timex(ctypes.Structure):
    _fields_ = [("modes", ctypes.c_uint), ("rest", ctypes.c_byte * 204)]


def call(nr, *args):
    return libc.syscall(L(nr), *[L(a) if isinstance(a, int) else a for a in args])


def probes(n):
    def ptrace_attach():
        target = os.fork()
        if target == 0:
            time.sleep(30)
            os._exit(0)
        try:
            return call(n["ptrace"], 16, target, 0, 0)  # PTRACE_ATTACH
        finally:
            os.kill(target, signal.SIGKILL)
            os.waitpid(target, 0)

    def clone_newuser():
        pid = call(n["clone"], 0x10000000 | signal.SIGCHLD, 0, 0, 0, 0)
        if pid == 0:
            os._exit(0)
        if pid > 0:
            os.waitpid(pid, 0)
        return pid

    def process_vm_readv():
        buffer = ctypes.create_string_buffer(8)
        source = ctypes.create_string_buffer(b"secret!")
        local = (ctypes.c_void_p * 2)(ctypes.addressof(buffer), 8)
        remote = (ctypes.c_void_p * 2)(ctypes.addressof(source), 8)
        return call(n["process_vm_readv"], os.getpid(), local, 1, remote, 1, 0)

    def userfaultfd():
        fd = call(n["userfaultfd"], 1)  # UFFD_USER_MODE_ONLY
        if fd >= 0:
            os.close(fd)
        return fd

    def name_to_handle_at():
        handle = ctypes.create_string_buffer(16)  # handle_bytes = 0: asks for the size
        mount_id = ctypes.c_int()
        return call(n["name_to_handle_at"], -100, b"/", handle, ctypes.byref(mount_id), 0)

    def clock_adjtime():
        return call(n["clock_adjtime"], 0, ctypes.byref(Timex()))  # modes 0: a query

    def adjtimex():
        return call(n["adjtimex"], ctypes.byref(Timex()))

    def fsopen():
        fd = call(n["fsopen"], b"tmpfs", 0)
        if fd >= 0:
            os.close(fd)
        return fd

    bad_time = (ctypes.c_long * 2)(0, -1)  # tv_nsec / tv_usec out of range: EINVAL if allowed
    return {
        "ptrace_traceme": lambda: call(n["ptrace"], 0, 0, 0, 0),
        "ptrace_attach": ptrace_attach,
        "process_vm_readv": process_vm_readv,
        "mount": lambda: call(n["mount"], b"none", MISSING, b"tmpfs", 0, 0),
        "umount2": lambda: call(n["umount2"], MISSING, 0),
        "open_tree": lambda: call(n["open_tree"], -100, MISSING, 0),
        "fsopen": fsopen,
        "bpf": lambda: call(n["bpf"], 0xFFFF, 0, 0),
        "keyctl": lambda: call(n["keyctl"], 0, -3, 0),  # KEYCTL_GET_KEYRING_ID, session
        "add_key": lambda: call(n["add_key"], b"user", b"rft-probe", b"x", 1, -2),
        "perf_event_open": lambda: call(n["perf_event_open"], 0, 0, -1, -1, 0),
        "init_module": lambda: call(n["init_module"], 0, 0, b""),
        "finit_module": lambda: call(n["finit_module"], -1, b"", 0),
        "delete_module": lambda: call(n["delete_module"], b"rft_no_such_module", 0o4000),
        "clock_settime": lambda: call(n["clock_settime"], 0, bad_time),
        "settimeofday": lambda: call(n["settimeofday"], bad_time, 0),
        "clock_adjtime": clock_adjtime,
        "adjtimex": adjtimex,
        "unshare_newuser": lambda: call(n["unshare"], 0x10000000),
        "clone_newuser": clone_newuser,
        "clone3": lambda: call(n["clone3"], 0, 0),
        "setns": lambda: call(n["setns"], -1, 0),
        "swapoff": lambda: call(n["swapoff"], MISSING),
        "syslog": lambda: call(n["syslog"], 10, 0, 0),  # SYSLOG_ACTION_SIZE_BUFFER
        "userfaultfd": userfaultfd,
        "name_to_handle_at": name_to_handle_at,
        "open_by_handle_at": lambda: call(n["open_by_handle_at"], -1, 0, 0),
        "io_uring_setup": lambda: call(n["io_uring_setup"], 1, 0),
        "personality": lambda: call(n["personality"], 0x0040000),  # ADDR_NO_RANDOMIZE
    }


def run_in_child(probe):
    """errno of `probe` in a forked child (0: it succeeded), so no side effect outlives it."""
    pid = os.fork()
    if pid == 0:
        try:
            result = probe()
            os._exit(ctypes.get_errno() if result == -1 else 0)
        except BaseException:
            os._exit(255)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def syscall_probe(prompt, completion, example):
    results = {name: run_in_child(probe) for name, probe in probes(example["numbers"]).items()}
    with open("/proc/self/status") as status:
        results.update(
            (key, int(value)) for key, value in (line.split(":") for line in status)
            if key in ("Seccomp", "Seccomp_filters")
        )
    print(json.dumps(results))
    return 1.0
'''
# Many tasks holding memory at once: each stays under RLIMIT_AS (memory_limit_mb per process),
# together they are several times over it.
MEMORY_TREE = """
import os, time

def attack(prompt, completion, example):
    children = []
    for _ in range(example["children"]):
        pid = os.fork()
        if pid == 0:
            hoard = []
            try:
                while len(hoard) < example["chunks"]:
                    hoard.append(b"x" * (8 << 20))  # written, so resident
            except MemoryError:
                pass
            time.sleep(example["hold_s"])
            os._exit(0)
        children.append(pid)
    statuses = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in children]
    print(statuses)
    return float(sum(status == -9 for status in statuses))
"""
# Fork until the kernel says no, keep every child until then, then let them all go.
FORK_UNTIL_REFUSED = """
import os

def attack(prompt, completion, example):
    read_end, write_end = os.pipe()
    children, refusal = [], None
    while len(children) < 1000:
        try:
            pid = os.fork()
        except OSError as error:
            refusal = error.errno
            break
        if pid == 0:
            os.close(write_end)
            os.read(read_end, 1)  # returns once the parent closes its end
            os._exit(0)
        children.append(pid)
    os.close(write_end)
    for pid in children:
        os.waitpid(pid, 0)
    print(refusal)
    return float(len(children))
"""


def run_once(sandbox: ProcessSandbox, source: str, **example: object) -> FunctionResult:
    spec = RewardFunctionSpec(name="attack", source=textwrap.dedent(source))
    sandbox.load([spec])
    batch = ScoringBatch(prompts=["p"], completions=["c"], examples=[dict(example)])
    return sandbox.score(batch)["attack"]


def assert_still_scores(sandbox: ProcessSandbox) -> None:
    honest = RewardFunctionSpec(
        name="honest",
        source="def honest(p, completion, e):\n    return float('ok' in completion)\n",
    )
    sandbox.load([honest])
    batch = ScoringBatch(prompts=["p", "p"], completions=["ok!", "no"], examples=[{}, {}])
    result = sandbox.score(batch)["honest"]
    assert result.scores == [1.0, 0.0] and not result.errors


def probe_syscalls(settings: SandboxSettings) -> dict[str, int]:
    architecture = ARCHITECTURES.get(platform.machine().lower())
    if architecture is None:
        skip_missing_layer(f"no seccomp filter for {platform.machine()}")
    spec = RewardFunctionSpec(name="syscall_probe", source=SYSCALL_PROBE)
    batch = ScoringBatch(
        prompts=["p"], completions=["c"], examples=[{"numbers": dict(architecture.syscalls)}]
    )
    with ProcessSandbox(settings) as sandbox:
        sandbox.load([spec])
        result = sandbox.score(batch)["syscall_probe"]
        assert not result.errors, result.errors
        assert_still_scores(sandbox)
    return dict(json.loads(result.logs))


@pytest.fixture(scope="module")
def unfiltered() -> dict[str, int]:
    """The probes in a plain child process as root: no seccomp filter, every capability."""
    logging.getLogger("sandbox.worker_process").setLevel(logging.ERROR)  # the 'none' warning
    return probe_syscalls(SandboxSettings(isolation="none", call_timeout_s=60))


@needs_bwrap
@needs_root
def test_refused_syscalls_fail_with_eperm_from_the_filter(unfiltered: dict[str, int]) -> None:
    filtered = probe_syscalls(SandboxSettings(isolation="bwrap", call_timeout_s=60))
    assert filtered.pop("Seccomp") == 2 and filtered.pop("Seccomp_filters") >= 1
    assert unfiltered.pop("Seccomp") == 0
    unfiltered.pop("Seccomp_filters")
    assert set(filtered) == set(unfiltered) and len(filtered) >= 25
    expected = {name: errno.EPERM for name in filtered} | {"clone3": errno.ENOSYS}
    assert filtered == expected
    # Without the filter none of them is refused that way: it is the filter that refuses.
    agreeing = {name for name, code in unfiltered.items() if code == expected[name]}
    assert not agreeing, {name: unfiltered[name] for name in agreeing}


@needs_bwrap
def test_threads_subprocess_asyncio_sockets_and_numpy_still_work() -> None:
    import numpy

    source = """
    import asyncio, concurrent.futures, os, socket, subprocess
    import numpy

    def everyday(prompt, completion, example):
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            squares = sum(pool.map(lambda n: n * n, range(10)))
        echoed = subprocess.run(["/bin/echo", "hi"], capture_output=True, check=True).stdout
        async def pair():
            await asyncio.sleep(0)
            return 1
        left, right = socket.socketpair()
        left.sendall(b"x")
        received = right.recv(1)
        pid = os.fork()
        if pid == 0:
            os._exit(7)
        status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        matrix = numpy.ones((256, 256))
        product = float((matrix @ matrix)[0, 0])  # BLAS, with its own threads
        ok = (squares == 285, echoed == b"hi\\n", asyncio.run(pair()) == 1, received == b"x")
        return float(all(ok) and status == 7 and product == 256.0)
    """
    # The job's packages are bound read-only; the test borrows the directory numpy lives in.
    packages = Path(numpy.__file__).parents[1]
    settings = SandboxSettings(
        isolation="bwrap",
        call_timeout_s=60,
        extra_python_paths=[packages],
        env={"OPENBLAS_NUM_THREADS": "4", "OMP_NUM_THREADS": "4"},
    )
    with ProcessSandbox(settings) as sandbox:
        sandbox.load([RewardFunctionSpec(name="everyday", source=textwrap.dedent(source))])
        batch = ScoringBatch(prompts=["p"], completions=["c"], examples=[{}])
        result = sandbox.score(batch)["everyday"]
    assert not result.errors, result.errors
    assert result.scores == [1.0]


def limited_sandbox(
    mode: CgroupMode,
    memory_limit_mb: int = 256,
    cgroup_pids_max: int = 64,
    max_processes: int = 64,
    tmp_size_mb: int = 16,
) -> ProcessSandbox:
    settings = SandboxSettings(
        isolation=ISOLATION,
        cgroups=mode,
        call_timeout_s=60,
        tmp_size_mb=tmp_size_mb,
        memory_limit_mb=memory_limit_mb,
        cgroup_pids_max=cgroup_pids_max,
        max_processes=max_processes,
    )
    return ProcessSandbox(settings)


@needs_cgroups
@pytest.mark.parametrize("mode", ["require", "off"])
def test_memory_of_the_whole_tree_is_capped(mode: CgroupMode) -> None:
    # Four children of up to 80 MiB each under a 128 MiB limit: every rlimit lets each one
    # through; only the tree's cgroup sees 320 MiB, and its OOM killer takes children.
    with limited_sandbox(mode, memory_limit_mb=128) as sandbox:
        result = run_once(sandbox, MEMORY_TREE, children=4, chunks=10, hold_s=2)
        assert not result.errors, result.errors
        (worker,) = sandbox._workers
        if mode == "off":
            assert worker.cgroup is None
            assert result.scores == [0.0], result.logs  # nothing killed them
        else:
            assert worker.cgroup is not None
            killed = result.scores[0]
            assert killed is not None and killed >= 1, result.logs
            counters = worker.cgroup.counters()
            assert counters.oom_kills >= 1, counters
            peak = counters.memory_peak_bytes
            assert peak is None or peak <= 128 << 20, counters
        assert_still_scores(sandbox)


@needs_cgroups
@pytest.mark.parametrize("mode", ["require", "off"])
def test_a_fork_bomb_stops_at_pids_max(mode: CgroupMode) -> None:
    # pids.max well under RLIMIT_NPROC, so it is the cgroup that must stop it.
    with limited_sandbox(mode, cgroup_pids_max=16, max_processes=64) as sandbox:
        result = run_once(sandbox, FORK_UNTIL_REFUSED)
        assert not result.errors, result.errors
        children = result.scores[0]
        assert children is not None and result.logs.strip() == str(errno.EAGAIN)
        (worker,) = sandbox._workers
        if mode == "off":
            assert children >= 16  # only the rlimit (64) stopped it
        else:
            assert worker.cgroup is not None
            assert children < 16
            assert worker.cgroup.counters().pids_refused >= 1
        assert_still_scores(sandbox)


@needs_cgroups
def test_running_the_tree_out_of_memory_is_reported_as_such() -> None:
    # /tmp's pages count against the cgroup but not against RLIMIT_AS: 56 MiB there plus a
    # heap that stays within the address-space limit is more than the tree may have.
    source = """
    def attack(prompt, completion, example):
        with open("/tmp/ballast", "wb") as ballast:
            for _ in range(7):
                ballast.write(b"x" * (8 << 20))
        hoard = []
        while True:
            hoard.append(b"y" * (4 << 20))
    """
    with limited_sandbox("require", memory_limit_mb=128, tmp_size_mb=64) as sandbox:
        result = run_once(sandbox, source)
        assert [error.kind for error in result.errors] == [RewardErrorKind.KILLED]
        assert "running out of memory" in result.errors[0].message
        assert "128 MiB" in result.errors[0].message
        assert_still_scores(sandbox)


@needs_cgroups
def test_the_cgroup_goes_with_its_sandbox() -> None:
    with limited_sandbox("require") as sandbox:
        (worker,) = sandbox._workers
        assert worker.cgroup is not None and worker.process is not None
        directories = worker.cgroup.directories
        assert all(directory.is_dir() for directory in directories)
        assert worker.process.pid in worker.cgroup.pids()
        first_cgroup = worker.cgroup
        worker.kill()  # as after a crash: the replacement gets a cgroup of its own
        assert not any(directory.exists() for directory in directories)
        assert_still_scores(sandbox)
        assert worker.cgroup is not None and worker.cgroup.name != first_cgroup.name
        replacement = worker.cgroup.directories
    assert not any(directory.exists() for directory in replacement)


def test_without_cgroups_auto_logs_once_and_require_refuses(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    missing = cgroups.CgroupSupport(None, "no mounted cgroup hierarchy offers memory")
    monkeypatch.setattr(cgroups, "detect_cgroups", lambda: missing)
    monkeypatch.setattr(cgroups, "_fallback_logged", False)
    settings = SandboxSettings(isolation=ISOLATION, workers=2)
    with caplog.at_level(logging.WARNING, logger="sandbox.cgroups"), ProcessSandbox(settings) as sb:
        assert all(worker.cgroup is None for worker in sb._workers)
        assert_still_scores(sb)
    fallbacks = [record for record in caplog.records if "rlimits only" in record.message]
    assert len(fallbacks) == 1 and "offers memory" in fallbacks[0].message
    with pytest.raises(SandboxUnavailableError, match="required"):
        ProcessSandbox(SandboxSettings(isolation=ISOLATION, cgroups="require"))


@pytest.fixture(autouse=True)
def _no_cgroup_left_behind() -> Iterator[None]:
    yield
    if CGROUPS.host is not None:
        mine = [
            entry
            for parent in CGROUPS.host.directories
            for entry in parent.iterdir()
            if entry.is_dir() and entry.name.startswith(f"rft-sandbox-{os.getpid()}-")
        ]
        assert not mine, mine
