"""One warm sandbox child process and the pipes to it: what the reward and agent hosts share.

``SandboxWorker`` starts a child program of sandbox/child/ (the reward child or the agent
child) under the isolation and limits of ``SandboxSettings`` (sandbox/isolation.py), hands it
the job's environment in its first frame, sends it one request at a time and kills it (its
whole process tree, its cgroup and its egress proxy) when it fails. ``check_isolation`` is the
check both hosts make before they start one.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import signal
import subprocess
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import IO, Any, Self

from sandbox.api import RewardErrorKind
from sandbox.cgroups import SandboxCgroup
from sandbox.child.framing import FRAME_HEADER, MAX_FRAME_BYTES, encode_frame
from sandbox.egress import EgressPolicy, EgressProxy
from sandbox.isolation import (
    REWARD_CHILD,
    SandboxUnavailableError,
    detect_isolation,
    plan_launch,
    spawn,
)
from sandbox.settings import SandboxSettings
from sandbox.uids import NoFreeUidError, UidLease, lease_uid

logger = logging.getLogger(__name__)

# Modules reward code can import inside the sandbox (retries with backoff, rate limits); sent
# with the first frame, so the sandbox's filesystem needs nothing more than the child programs'
# folder.
HELPER_MODULES = {"rft_reward": Path(__file__).with_name("rft_reward.py").read_text()}
# A warm child is replaced before its RLIMIT_CPU can fire in the middle of a call.
CPU_RECYCLE_FRACTION = 0.8
READ_CHUNK = 1 << 20


class WorkerFailure(Exception):
    """The child did not answer a request properly; it has been killed."""

    def __init__(self, kind: RewardErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


class SandboxWorker:
    """One warm child process and the pipes to it. Not thread-safe: one request at a time."""

    def __init__(
        self, settings: SandboxSettings, label: str, child_program: str = REWARD_CHILD
    ) -> None:
        self.settings = settings
        self.label = label
        self.child_program = child_program  # the program the child runs (reward or agent)
        self.process: subprocess.Popen[bytes] | None = None
        # As root, each child runs as a uid of its own (sandbox.uids), leased at every start:
        # a replacement never shares a uid with the processes of the child it replaces.
        self.uid_lease: UidLease | None = None
        # Host pid of the pid namespace's init (bwrap only); killing it empties the namespace.
        self.namespace_init_pid: int | None = None
        self.cgroup: SandboxCgroup | None = None  # the tree's own cgroup, if the host has them
        # allow_network: this child's way out (a proxy on a unix socket of its own), which lives
        # and dies with the child.
        self.egress: EgressProxy | None = None
        self.loaded_body: bytes | None = None  # the load request this child has accepted
        self._diagnostics: IO[bytes] | None = None
        self._inbox = bytearray()

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> None:
        """Start the child and wait for it to say it is ready; SandboxUnavailableError if not."""
        self.shut_down()
        # bwrap reports setup failures on stderr; the child moves its own fd 2 away at startup.
        self._diagnostics = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the child
        self._inbox = bytearray()
        self.loaded_body = None
        settings = self._lease_uid()
        if settings.allow_network and settings.isolation == "bwrap":
            self.egress = _egress_proxy(settings)
        try:
            plan = plan_launch(
                settings,
                child_program=self.child_program,
                egress_socket=self.egress.socket_path if self.egress is not None else None,
            )
            spawned = spawn(
                plan,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._diagnostics,
                bufsize=0,
            )
        except BaseException as error:
            self.kill()  # the egress proxy, if one started
            if isinstance(error, OSError):
                raise SandboxUnavailableError(
                    f"cannot start the sandbox process: {error}"
                ) from error
            raise
        self.process = spawned.process
        self.cgroup = spawned.cgroup
        if spawned.info_fd is not None:
            self.namespace_init_pid = _read_namespace_init_pid(
                spawned.info_fd, time.monotonic() + self.settings.start_timeout_s
            )
        assert self.process.stdin is not None and self.process.stdout is not None
        os.set_blocking(self.process.stdin.fileno(), False)
        os.set_blocking(self.process.stdout.fileno(), False)
        configuration = encode_frame({"env": self.settings.env, "modules": HELPER_MODULES})
        try:
            reply = self.request(configuration, self.settings.start_timeout_s)
        except WorkerFailure as failure:
            raise SandboxUnavailableError(
                f"the sandbox process did not start ({failure.message}); "
                f"its setup said: {self._read_diagnostics() or '(nothing)'}"
            ) from None
        if not reply.get("ready"):
            self.kill()
            raise SandboxUnavailableError(f"the sandbox process answered {reply!r} at startup")

    def _lease_uid(self) -> SandboxSettings:
        """The settings to launch with: with a leased uid when the child must drop to one."""
        settings = self.settings
        if settings.isolation != "bwrap" or os.geteuid() != 0 or settings.sandbox_uid is not None:
            return settings
        try:
            self.uid_lease = lease_uid(
                settings.uid_range_first,
                settings.uid_range_count,
                settings.uid_lock_dir or Path(tempfile.gettempdir()) / "rft-sandbox-uids",
            )
        except (NoFreeUidError, OSError) as error:
            raise SandboxUnavailableError(f"no sandbox uid to run as: {error}") from error
        return replace(settings, sandbox_uid=self.uid_lease.uid)

    def request(self, frame: bytes, timeout_s: float) -> dict[str, Any]:
        """Send one frame and return the reply; WorkerFailure (child killed) on any fault."""
        if self.process is None:
            raise WorkerFailure(RewardErrorKind.SANDBOX, "the sandbox process is not running")
        deadline = time.monotonic() + timeout_s
        try:
            self._send(frame, deadline)
            body = self._receive(deadline)
        except TimeoutError:
            self.kill()
            raise WorkerFailure(
                RewardErrorKind.TIMEOUT,
                f"no answer within {timeout_s:g} s; the sandbox process was killed",
            ) from None
        except (BrokenPipeError, EOFError, ConnectionError):
            raise WorkerFailure(RewardErrorKind.KILLED, self._describe_death()) from None
        except ValueError as error:
            self.kill()
            raise WorkerFailure(RewardErrorKind.SANDBOX, f"broken reply: {error}") from None
        try:
            reply = json.loads(body)
        except ValueError:
            reply = None
        if not isinstance(reply, dict):
            self.kill()
            raise WorkerFailure(
                RewardErrorKind.SANDBOX, "the sandbox process sent a malformed reply"
            )
        return reply

    def cpu_share(self, reply: dict[str, Any]) -> float:
        """The share of its CPU-time limit the child had used when it sent `reply`."""
        cpu_s = reply.get("cpu_s")
        return cpu_s / self.settings.cpu_time_limit_s if isinstance(cpu_s, int | float) else 0.0

    def worn_out(self, reply: dict[str, Any]) -> bool:
        """Whether to replace the child before its CPU-time limit fires in a later call."""
        return self.cpu_share(reply) > CPU_RECYCLE_FRACTION

    def _send(self, frame: bytes, deadline: float) -> None:
        assert self.process is not None and self.process.stdin is not None
        fd = self.process.stdin.fileno()
        view = memoryview(frame)
        while view:
            try:
                written = os.write(fd, view)
            except BlockingIOError:
                written = 0
            view = view[written:]
            if view:
                self._wait(fd, deadline, select.POLLOUT)

    def _receive(self, deadline: float) -> bytes:
        assert self.process is not None and self.process.stdout is not None
        fd = self.process.stdout.fileno()
        inbox = self._inbox
        while True:
            if len(inbox) >= FRAME_HEADER.size:
                (size,) = FRAME_HEADER.unpack_from(inbox)
                if size > MAX_FRAME_BYTES:
                    raise ValueError(f"a frame of {size} bytes")
                end = FRAME_HEADER.size + size
                if len(inbox) >= end:
                    body = bytes(inbox[FRAME_HEADER.size : end])
                    del inbox[:end]
                    return body
            try:
                chunk = os.read(fd, READ_CHUNK)
            except BlockingIOError:
                self._wait(fd, deadline, select.POLLIN)
                continue
            if not chunk:
                raise EOFError
            inbox += chunk

    @staticmethod
    def _wait(fd: int, deadline: float, event: int) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        poller = select.poll()
        poller.register(fd, event)
        if not poller.poll(remaining * 1000):
            raise TimeoutError

    def _describe_death(self) -> str:
        assert self.process is not None
        try:
            code = self.process.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            self.kill()
            return "the sandbox process closed its pipe and was killed"
        # Read before kill() removes the cgroup. SIGKILL shows as 137 through bwrap.
        oom_killed = code in (-signal.SIGKILL, 128 + signal.SIGKILL) and (
            self.cgroup is not None and self.cgroup.counters().oom_kills > 0
        )
        self.kill()
        if oom_killed:
            return (
                "the sandbox process was killed for running out of memory: its processes "
                f"together reached the {self.settings.memory_limit_mb} MiB limit"
            )
        if code < 0:
            name = (
                signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else -code
            )
            reason = {
                "SIGKILL": "killed (out of memory, the CPU-time limit, or a kill)",
                "SIGXCPU": "killed for exceeding the CPU-time limit",
                "SIGXFSZ": "killed for writing a file larger than the limit",
                "SIGSEGV": "crashed (segmentation fault)",
            }.get(str(name), f"killed by signal {name}")
            return f"the sandbox process was {reason}"
        return f"the sandbox process exited with status {code}"

    def _read_diagnostics(self) -> str:
        if self._diagnostics is None:
            return ""
        self._diagnostics.seek(0)
        return self._diagnostics.read(4096).decode(errors="replace").strip()

    def kill(self) -> None:
        """SIGKILL the child and everything it started.

        Under bwrap, the namespace's init is killed first: the kernel then kills every process
        in the namespace, however it hid (new session, double fork), and bwrap reaps them all.
        """
        process, self.process = self.process, None
        init_pid, self.namespace_init_pid = self.namespace_init_pid, None
        self.loaded_body = None
        if process is not None:
            if (
                init_pid is not None
                and process.poll() is None
                and _parent_of(init_pid) == process.pid
            ):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(init_pid, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(timeout=2.0)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            process.wait()
            for pipe in (process.stdin, process.stdout):
                if pipe is not None:
                    pipe.close()
        cgroup, self.cgroup = self.cgroup, None
        if cgroup is not None:
            cgroup.remove()
        egress, self.egress = self.egress, None
        if egress is not None:
            egress.close()

    def shut_down(self) -> None:
        self.kill()
        if self._diagnostics is not None:
            self._diagnostics.close()
            self._diagnostics = None
        if self.uid_lease is not None:
            self.uid_lease.release()  # only now that its processes are gone
            self.uid_lease = None


def _egress_proxy(settings: SandboxSettings) -> EgressProxy:
    policy = EgressPolicy(
        allowed_hosts=settings.egress_allowed_hosts,
        deployment_hosts=settings.egress_deployment_hosts,
        denied_networks=settings.egress_denied_networks,
        only_hosts=settings.egress_only_hosts,
    )
    try:
        # As root the child runs as its leased uid: only that uid may connect.
        return EgressProxy(policy, owner_uid=settings.sandbox_uid)
    except OSError as error:
        raise SandboxUnavailableError(f"cannot start the egress proxy: {error}") from error


def _parent_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return None
    # The command name may contain spaces and parentheses; the fields follow the last ')'.
    fields = stat[stat.rindex(b")") + 2 :].split()
    return int(fields[1])


def _read_namespace_init_pid(info_fd: int, deadline: float) -> int | None:
    """Read bwrap's {"child-pid": N} from its info pipe; None if it never comes."""
    received = b""
    try:
        while time.monotonic() < deadline:
            poller = select.poll()
            poller.register(info_fd, select.POLLIN)
            if not poller.poll(max(deadline - time.monotonic(), 0) * 1000):
                return None
            chunk = os.read(info_fd, 4096)
            if not chunk:
                break
            received += chunk
            try:
                info = json.loads(received)
            except ValueError:
                continue
            pid = info.get("child-pid") if isinstance(info, dict) else None
            return pid if isinstance(pid, int) else None
    finally:
        os.close(info_fd)
    return None


class WorkerHost:
    """What both sandboxes on workers share: they start their workers or close, and a ``with``
    block closes them."""

    def close(self) -> None:
        raise NotImplementedError

    def _start_or_close(self, workers: list[SandboxWorker]) -> None:
        try:
            for worker in workers:
                worker.start()
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def check_isolation(settings: SandboxSettings, code: str) -> None:
    """Refuse bwrap settings this machine cannot honour; warn loudly when `code` (what the
    sandbox runs, for the messages) is to run without isolation."""
    if settings.isolation == "bwrap":
        check = detect_isolation()
        if not check:
            raise SandboxUnavailableError(
                f"bubblewrap isolation is not usable here: {check.reason}. Fix that, or set "
                f"isolation='none' to run {code} WITHOUT isolation (development only)"
            )
    else:
        logger.warning(
            "%s runs WITHOUT isolation (isolation='none'): it can read the worker's files and "
            "reach its network and sockets; use isolation='bwrap' in production",
            code,
        )
