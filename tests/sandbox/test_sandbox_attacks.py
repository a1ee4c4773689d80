"""Hostile reward code against the bubblewrap sandbox.

Each case runs an attack as a reward function, checks that it achieved nothing outside the
sandbox, and then checks that the same sandbox scores a normal batch correctly afterwards.
"""

from __future__ import annotations

import os
import socket
import textwrap
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

# Submodules, not the package: under pytest the tests/sandbox folder can shadow the name.
from sandbox.api import FunctionResult, RewardErrorKind, RewardFunctionSpec, ScoringBatch
from sandbox.isolation import detect_isolation
from sandbox.reward_host import ProcessSandbox
from sandbox.settings import SandboxSettings
from tests.layers import needs_layer

BWRAP = detect_isolation()
pytestmark = needs_layer(BWRAP, f"bubblewrap is not usable here: {BWRAP.reason}")

WORKER_SECRET = "worker-secret-3f9a"
JOB_SECRET = "job-secret-77c1"
TMP_SIZE_MB = 16
MAX_PROCESSES = 32
CALL_TIMEOUT_S = 1.0
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def sandbox() -> Iterator[ProcessSandbox]:
    os.environ["RFT_ATTACK_WORKER_SECRET"] = WORKER_SECRET
    settings = SandboxSettings(
        isolation="bwrap",
        env={"JOB_SECRET": JOB_SECRET},
        call_timeout_s=CALL_TIMEOUT_S,
        kill_grace_s=0.3,
        memory_limit_mb=128,
        tmp_size_mb=TMP_SIZE_MB,
        max_processes=MAX_PROCESSES,
        log_limit_bytes=4096,
    )
    with ProcessSandbox(settings) as running:
        yield running


def attack(sandbox: ProcessSandbox, source: str, **example: object) -> FunctionResult:
    """Run `source` (a function `attack(prompt, completion, example)`) on one sample."""
    spec = RewardFunctionSpec(name="attack", source=textwrap.dedent(source))
    sandbox.load([spec])
    batch = ScoringBatch(prompts=["p"], completions=["c"], examples=[dict(example)])
    result = sandbox.score(batch)["attack"]
    assert_still_scores(sandbox)
    return result


def assert_still_scores(sandbox: ProcessSandbox) -> None:
    honest = RewardFunctionSpec(
        name="honest",
        source=(
            "import re\n"
            "def honest(p, completion, e):\n"
            "    return float(bool(re.search('ok', completion)))\n"
        ),
    )
    sandbox.load([honest])
    batch = ScoringBatch(prompts=["p", "p"], completions=["ok!", "no"], examples=[{}, {}])
    result = sandbox.score(batch)["honest"]
    assert result.scores == [1.0, 0.0] and not result.errors


def only_score(result: FunctionResult) -> float | None:
    assert not result.errors, result.errors
    return result.scores[0]


def test_no_tcp_to_the_hosts_loopback(sandbox: ProcessSandbox) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.5)
    port = listener.getsockname()[1]
    result = attack(
        sandbox,
        """
        import socket
        def attack(p, c, example):
            try:
                socket.create_connection(("127.0.0.1", example["port"]), timeout=0.5)
            except OSError as error:
                print(error)
                return 0.0
            return 1.0
        """,
        port=port,
    )
    assert only_score(result) == 0.0
    with pytest.raises(TimeoutError):
        listener.accept()
    listener.close()


def test_allow_network_never_reaches_the_hosts_loopback() -> None:
    """With the network, raw sockets still reach nothing of the host, and the egress proxy
    refuses loopback (tests/sandbox/test_sandbox_egress.py tests the way out)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.setblocking(False)
    settings = SandboxSettings(isolation="bwrap", allow_network=True, call_timeout_s=5)
    with ProcessSandbox(settings) as sandbox:
        result = attack(
            sandbox,
            """
            import socket, urllib.request
            def attack(p, c, example):
                port = example["port"]
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=2).close()
                    return 1.0
                except OSError:
                    pass
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5)
                    return 2.0
                except urllib.error.HTTPError as error:
                    print(error)
                return 0.0
            """,
            port=listener.getsockname()[1],
        )
    assert only_score(result) == 0.0
    assert "403: refused by the egress policy: 127.0.0.1 is a loopback address" in result.logs
    with pytest.raises(BlockingIOError):
        listener.accept()
    listener.close()


def test_no_route_to_the_outside(sandbox: ProcessSandbox) -> None:
    result = attack(
        sandbox,
        """
        import socket
        def attack(p, c, e):
            try:
                socket.create_connection(("1.1.1.1", 443), timeout=0.5)
            except OSError:
                return 0.0
            return 1.0
        """,
    )
    assert only_score(result) == 0.0


def test_no_unix_sockets_of_the_host(sandbox: ProcessSandbox, tmp_path: Path) -> None:
    run_dir = Path("/run") / f"rft-attack-{os.getpid()}"
    run_dir.mkdir(exist_ok=True)
    paths = [str(tmp_path / ".s.PGSQL.5432"), str(run_dir / "postgres.sock")]
    listeners = []
    for path in paths:
        listener = socket.socket(socket.AF_UNIX)
        listener.bind(path)
        os.chmod(path, 0o777)  # even a world-writable socket must be out of reach
        listener.listen()
        listeners.append(listener)
    abstract = socket.socket(socket.AF_UNIX)
    abstract.bind(f"\0rft-attack-{os.getpid()}")
    abstract.listen()
    try:
        result = attack(
            sandbox,
            """
            import socket
            def attack(p, c, example):
                reached = 0
                for path in example["paths"]:
                    try:
                        socket.socket(socket.AF_UNIX).connect(path)
                        reached += 1
                    except OSError:
                        pass
                return reached
            """,
            paths=[*paths, f"\0rft-attack-{os.getpid()}"],
        )
        assert only_score(result) == 0.0
    finally:
        for listener in [*listeners, abstract]:
            listener.close()
        for path in paths:
            os.unlink(path)
        run_dir.rmdir()


def test_no_secrets_from_the_workers_environment(sandbox: ProcessSandbox) -> None:
    result = attack(
        sandbox,
        """
        import os
        def attack(p, c, example):
            assert os.environ.get("JOB_SECRET") == example["job_secret"]
            leaked = [k for k, v in os.environ.items() if v == example["worker_secret"]]
            return float(len(leaked))
        """,
        job_secret=JOB_SECRET,
        worker_secret=WORKER_SECRET,
    )
    assert only_score(result) == 0.0


def test_no_other_processes_in_proc(sandbox: ProcessSandbox) -> None:
    result = attack(
        sandbox,
        """
        import os
        def attack(p, c, example):
            found = 0
            candidates = [d for d in os.listdir("/proc") if d.isdigit()]
            candidates += [str(example["host_pid"]), "1"]
            for pid in candidates:
                try:
                    with open(f"/proc/{pid}/environ", "rb") as handle:
                        found += example["secret"].encode() in handle.read()
                except OSError:
                    pass
            visible = len([d for d in os.listdir("/proc") if d.isdigit()])
            return found * 1000 + visible
        """,
        host_pid=os.getpid(),
        secret=WORKER_SECRET,
    )
    score = only_score(result)
    assert score is not None and score < 1000  # no environ leaked
    assert score <= 3  # only bwrap's init and the child itself are visible


def test_no_shadow_and_no_host_files(sandbox: ProcessSandbox) -> None:
    result = attack(
        sandbox,
        """
        import os
        def attack(p, c, example):
            readable = []
            for path in ["/etc/shadow", "/root", example["repo"], "/run", "/var/run", "/home"]:
                if os.path.exists(path):
                    readable.append(path)
            print(readable)
            return float(len(readable))
        """,
        repo=str(REPO),
    )
    assert only_score(result) == 0.0, result.logs


def test_no_writes_outside_tmp(sandbox: ProcessSandbox) -> None:
    before = (REPO / "sandbox" / "child" / "runtime.py").read_bytes()
    result = attack(
        sandbox,
        """
        import os, subprocess
        def attack(p, c, example):
            written = []
            for path in ["/etc/rft-owned", "/usr/lib/rft-owned", "/opt/python/rft-owned",
                         "/opt/rft/child/runtime.py", "/opt/rft/child/rft-owned", "/rft-owned",
                         example["repo_file"]]:
                try:
                    with open(path, "a") as handle:
                        handle.write("owned")
                    written.append(path)
                except OSError:
                    pass
            for target in ["/usr/lib", "/opt/rft/child", "/"]:
                remount = subprocess.run(["mount", "-o", "remount,rw", target], capture_output=True)
                if remount.returncode == 0:
                    written.append("remount " + target)
            with open("/tmp/fine", "w") as handle:
                handle.write("tmp is writable")
            print(written)
            return float(len(written))
        """,
        repo_file=str(REPO / "sandbox" / "child" / "runtime.py"),
    )
    assert only_score(result) == 0.0, result.logs
    assert (REPO / "sandbox" / "child" / "runtime.py").read_bytes() == before
    assert not Path("/etc/rft-owned").exists() and not Path("/usr/lib/rft-owned").exists()


def test_filling_tmp_stops_at_its_limit(sandbox: ProcessSandbox) -> None:
    result = attack(
        sandbox,
        """
        import os
        def attack(p, c, e):
            chunk = b"x" * (1 << 20)
            written = 0
            try:
                for index in range(10_000):
                    with open(f"/tmp/fill-{index}", "wb") as handle:
                        for _ in range(8):
                            handle.write(chunk)
                            written += len(chunk)
            except OSError:
                pass
            return written / (1 << 20)
        """,
    )
    written_mb = only_score(result)
    assert written_mb is not None and written_mb <= TMP_SIZE_MB + 1


def test_fork_bomb_is_capped_and_cleaned_up(sandbox: ProcessSandbox) -> None:
    sandbox.load([RewardFunctionSpec(name="warm", source="def warm(p, c, e):\n    return 1\n")])
    (worker,) = sandbox._workers
    assert worker.namespace_init_pid is not None
    namespace = os.readlink(f"/proc/{worker.namespace_init_pid}/ns/pid")
    result = attack(
        sandbox,
        """
        import os
        def attack(p, c, e):
            while True:
                try:
                    os.fork()
                except OSError:
                    pass
        """,
    )
    assert result.scores == [None]
    assert result.errors[0].kind in (RewardErrorKind.TIMEOUT, RewardErrorKind.SANDBOX)
    # The sandbox was replaced and its whole pid namespace went with it (the kernel may take
    # a moment to reap thousands of processes on a loaded machine). Namespace inode numbers
    # are reused, so the replacement sandbox may show the same one: its processes don't count.
    sandbox.score(ScoringBatch(prompts=["p"], completions=["c"], examples=[{}]))
    replacement = sandbox._workers[0].namespace_init_pid
    assert replacement is not None
    spared = _process_tree(replacement)
    deadline = time.monotonic() + 10
    while _live_processes_in(namespace, spared) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _live_processes_in(namespace, spared) == 0


def test_forks_stop_at_the_process_limit(sandbox: ProcessSandbox) -> None:
    result = attack(
        sandbox,
        """
        import os, time
        def attack(p, c, e):
            children = 0
            while children < 10_000:
                try:
                    pid = os.fork()
                except OSError:
                    break
                if pid == 0:
                    time.sleep(30)
                    os._exit(0)
                children += 1
            return children
        """,
    )
    children = only_score(result)
    assert children is not None and children < MAX_PROCESSES


@needs_layer(os.geteuid() == 0, "uids are leased only when the worker is root")
def test_a_sandbox_at_its_process_limit_does_not_starve_another() -> None:
    """RLIMIT_NPROC counts a uid's processes host-wide: each child runs as a uid of its own,
    so one job holding its whole process quota cannot stop another job's sandbox."""
    settings = SandboxSettings(isolation="bwrap", call_timeout_s=20, max_processes=MAX_PROCESSES)
    hog = RewardFunctionSpec(
        name="hog",
        source=textwrap.dedent(
            """
            import os, time
            def hog(p, c, e):
                children = 0
                while True:
                    try:
                        pid = os.fork()
                    except OSError:
                        break
                    if pid == 0:
                        time.sleep(60)
                        os._exit(0)
                    children += 1
                time.sleep(8)  # hold the quota while the other sandbox starts and forks
                return children
            """
        ),
    )
    forker = RewardFunctionSpec(
        name="forker",
        source=textwrap.dedent(
            """
            import os
            def forker(p, c, e):
                for _ in range(5):
                    if os.fork() == 0:
                        os._exit(0)
                    os.wait()
                return os.getuid()
            """
        ),
    )
    batch = ScoringBatch(prompts=["p"], completions=["c"], examples=[{}])
    with ProcessSandbox(settings) as first:
        first.load([hog])
        lease = first._workers[0].uid_lease
        assert lease is not None
        with ThreadPoolExecutor(1) as pool:
            held = pool.submit(first.score, batch)
            deadline = time.monotonic() + 20
            while _processes_of_uid(lease.uid) < MAX_PROCESSES - 1:
                assert time.monotonic() < deadline, "the hog never reached its process limit"
                time.sleep(0.05)
            with ProcessSandbox(settings) as second:  # starts while the first is at its limit
                second.load([forker])
                result = second.score(batch)["forker"]
            hogged = held.result()["hog"]
    assert not result.errors, result.errors
    assert result.scores[0] not in (None, float(lease.uid))
    assert hogged.scores[0] is not None and hogged.scores[0] < MAX_PROCESSES


def _processes_of_uid(uid: int) -> int:
    count = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/status") as handle:
                real_uid = next(line for line in handle if line.startswith("Uid:")).split()[1]
        except (OSError, StopIteration):
            continue
        count += int(real_uid) == uid
    return count


def test_memory_hog_is_contained(sandbox: ProcessSandbox) -> None:
    result = attack(
        sandbox,
        """
        def attack(p, c, e):
            hoard = []
            while True:
                hoard.append(b"x" * (16 << 20))
        """,
    )
    assert result.errors[0].kind in (RewardErrorKind.EXCEPTION, RewardErrorKind.KILLED)


def test_infinite_loop_that_ignores_signals_is_killed(sandbox: ProcessSandbox) -> None:
    # It never returns by itself: an answer at all is the parent's kill.
    result = attack(
        sandbox,
        """
        import signal
        def attack(p, c, e):
            for number in (signal.SIGALRM, signal.SIGTERM, signal.SIGINT, signal.SIGXCPU):
                signal.signal(number, signal.SIG_IGN)
            while True:
                pass
        """,
    )
    assert result.errors[0].kind == RewardErrorKind.TIMEOUT


def test_output_flood_is_truncated_quickly(sandbox: ProcessSandbox) -> None:
    # Quickly: a score at all means it ended within the call's limit (CALL_TIMEOUT_S).
    result = attack(
        sandbox,
        """
        import os, sys
        def attack(p, c, e):
            line = "y" * (1 << 20)
            for _ in range(1024):
                print(line)
                sys.stderr.write(line)
            raw = line.encode()
            written = 0
            for _ in range(256):
                try:
                    os.write(1, raw)
                except OSError:
                    break  # the capture file is bounded by the file-size limit
                written += 1
            return float(written)
        """,
    )
    # 256 MiB were offered to fd 1; the file-size limit stopped them at the sandbox's /tmp size.
    written = only_score(result)
    assert written is not None and written <= TMP_SIZE_MB
    assert result.logs_truncated and len(result.logs) < 5000


def test_killing_the_parent_is_impossible(sandbox: ProcessSandbox) -> None:
    result = attack(
        sandbox,
        """
        import os, signal
        def attack(p, c, example):
            failures = 0
            # The namespace's init (root), this worker's host pid (invisible), and everything.
            for pid in (os.getppid(), example["host_pid"], 1, -1):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    failures += 1
            return failures
        """,
        host_pid=os.getpid(),
    )
    # kill(-1) finds nothing it may signal but itself, which it skips; so all four fail.
    assert only_score(result) == 4.0


def test_suicide_by_kill_minus_one_is_survived(sandbox: ProcessSandbox) -> None:
    result = attack(
        sandbox,
        """
        import os, signal
        def attack(p, c, e):
            if os.fork() == 0:
                os.kill(-1, signal.SIGKILL)  # from a child: takes its parent, the worker child
                os._exit(0)
            os.wait()
            return 1.0
        """,
    )
    assert [error.kind for error in result.errors] == [RewardErrorKind.KILLED]


def _live_processes_in(namespace: str, spared: frozenset[int] = frozenset()) -> int:
    """Processes of the host in pid namespace `namespace` that are not zombies nor spared."""
    count = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if int(pid) in spared:
            continue
        try:
            in_namespace = os.readlink(f"/proc/{pid}/ns/pid") == namespace
            with open(f"/proc/{pid}/stat", "rb") as handle:
                state = handle.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        count += in_namespace and state != b"Z"
    return count


def _process_tree(root: int) -> frozenset[int]:
    """``root`` and all its descendants, from the host's /proc."""
    parents: dict[int, int] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat", "rb") as handle:
                parents[int(pid)] = int(handle.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    tree = {root}
    grew = True
    while grew:
        children = {pid for pid, parent in parents.items() if parent in tree} - tree
        tree |= children
        grew = bool(children)
    return frozenset(tree)
