"""Warm sandbox processes that score batches, and the RewardSandbox built on them.

Each function scores each batch in its own request with its own deadline, so a function that
hangs or kills its process costs only its own scores: the process is killed, started again,
given the loaded functions again, and the other functions carry on.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import select
import signal
import subprocess
import tempfile
import threading
import time
import weakref
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import IO, Any

from sandbox.api import (
    FunctionResult,
    RewardCodeError,
    RewardError,
    RewardErrorKind,
    RewardFunctionSpec,
    RewardSandbox,
    ScoringBatch,
)
from sandbox.cgroups import SandboxCgroup
from sandbox.child import (
    FRAME_HEADER,
    MAX_FRAME_BYTES,
    encode_frame,
    frame_from_body,
    to_json_compatible,
)
from sandbox.egress import EgressPolicy, EgressProxy
from sandbox.inspection import find_reward_entry_point
from sandbox.isolation import (
    CHILD_PROGRAM,
    SandboxUnavailableError,
    detect_isolation,
    plan_launch,
    spawn,
)
from sandbox.redaction import SecretMask
from sandbox.settings import SandboxSettings
from sandbox.uids import NoFreeUidError, UidLease, lease_uid

logger = logging.getLogger(__name__)

# Modules reward code can import inside the sandbox (retries with backoff, rate limits); sent
# with the first frame, so the sandbox's filesystem needs nothing more than the child program.
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
        self, settings: SandboxSettings, label: str, child_program: Path = CHILD_PROGRAM
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


def _kill_all(workers: list[SandboxWorker]) -> None:
    for worker in workers:
        worker.shut_down()


class ProcessSandbox(RewardSandbox):
    """RewardSandbox backed by `settings.workers` warm child processes fed over pipes."""

    def __init__(self, settings: SandboxSettings) -> None:
        self.settings = settings
        if settings.isolation == "bwrap":
            check = detect_isolation()
            if not check:
                raise SandboxUnavailableError(
                    f"bubblewrap isolation is not usable here: {check.reason}. Fix that, or set "
                    "isolation='none' to run reward code WITHOUT isolation (development only)"
                )
        else:
            logger.warning(
                "reward code runs WITHOUT isolation (isolation='none'): it can read the worker's "
                "files and reach its network and sockets; use isolation='bwrap' in production"
            )
        self._workers = [
            SandboxWorker(settings, f"sandbox-{index}") for index in range(settings.workers)
        ]
        self._specs: list[RewardFunctionSpec] = []
        self._mask = SecretMask(settings.env)
        self._load_frame: bytes | None = None
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._closed = False
        # Children die with us in any case (PDEATHSIG); this also covers a plain interpreter exit.
        self._finalizer = weakref.finalize(self, _kill_all, self._workers)
        try:
            for worker in self._workers:
                worker.start()
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> ProcessSandbox:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def functions(self) -> list[RewardFunctionSpec]:
        return list(self._specs)

    def load(self, functions: Sequence[RewardFunctionSpec]) -> None:
        specs = list(functions)
        names = [spec.name for spec in specs]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise RewardCodeError(duplicates[0], "two reward functions share this name")
        entries = [find_reward_entry_point(spec.name, spec.source) for spec in specs]
        frame = encode_frame(
            {
                "op": "load",
                "timeout_s": self.settings.effective_load_timeout_s,
                "functions": [
                    {
                        "name": spec.name,
                        "source": spec.source,
                        "version": spec.version,
                        "entry": entry.function_name,
                        "form": entry.form.value,
                        "max_concurrency": spec.max_concurrency,
                        "sample_timeout_s": min(
                            spec.sample_timeout_s or self.settings.sample_timeout_s,
                            self.settings.call_timeout_s,
                        ),
                        "rate_limit_per_s": spec.rate_limit_per_s,
                    }
                    for spec, entry in zip(specs, entries, strict=True)
                ],
            }
        )
        with self._lock:
            self._check_open()
            for index, worker in enumerate(self._workers):
                try:
                    self._load_into(worker, frame, names)
                except RewardCodeError as error:
                    # Keep every worker on the same functions: roll the ones already done back.
                    for done in self._workers[:index]:
                        self._restart(done)
                    if self._mask:
                        raise RewardCodeError(
                            error.function_name, self._mask.text(error.message)
                        ) from None
                    raise
            self._specs = specs
            self._load_frame = frame

    def _load_into(self, worker: SandboxWorker, frame: bytes, names: list[str]) -> None:
        if not worker.alive:
            self._restart(worker)
        try:
            reply = worker.request(frame, self._hard_load_timeout_s())
        except WorkerFailure as failure:
            self._restart(worker)
            raise RewardCodeError(", ".join(names), f"loading failed: {failure.message}") from None
        if reply.get("stray_processes") is not False:
            # Module-level code left processes behind; the next use starts a clean child.
            worker.kill()
        if reply.get("ok") is True:
            if worker.alive:
                worker.loaded_body = frame
            return
        errors = reply.get("errors")
        if isinstance(errors, dict) and errors:
            name, detail = next(iter(errors.items()))
            raise RewardCodeError(str(name), f"loading failed:\n{detail}")
        raise RewardCodeError(", ".join(names), f"loading failed: {reply.get('sandbox_error')}")

    def score(self, batch: ScoringBatch) -> dict[str, FunctionResult]:
        count = len(batch.completions)
        if len(batch.prompts) != count or len(batch.examples) != count:
            raise ValueError(
                f"batch has {len(batch.prompts)} prompts, {count} completions and "
                f"{len(batch.examples)} examples; they must match"
            )
        with self._lock:
            self._check_open()
            specs = self._specs
            if not specs:
                return {}
            batch_body = json.dumps(
                {
                    "prompts": batch.prompts,
                    "completions": batch.completions,
                    "examples": batch.examples,
                    "step": batch.step,
                    **({"trajectories": batch.trajectories} if batch.trajectories else {}),
                },
                separators=(",", ":"),
                default=to_json_compatible,
            ).encode()
            frames = [self._score_frame(spec, batch_body) for spec in specs]
            workers = self._workers
            if len(workers) == 1 or len(specs) == 1:
                results = [
                    self._score_on(workers[0], spec, frame, count)
                    for spec, frame in zip(specs, frames, strict=True)
                ]
            else:
                results = self._score_in_parallel(specs, frames, count)
        return {result.name: self._mask.result(result) for result in results}

    def _score_in_parallel(
        self, specs: list[RewardFunctionSpec], frames: list[bytes], count: int
    ) -> list[FunctionResult]:
        workers = self._workers
        if self._pool is None:
            self._pool = ThreadPoolExecutor(len(workers), thread_name_prefix="sandbox")
        shares = [list(range(index, len(specs), len(workers))) for index in range(len(workers))]

        def run_share(
            worker: SandboxWorker, indices: list[int]
        ) -> list[tuple[int, FunctionResult]]:
            return [(i, self._score_on(worker, specs[i], frames[i], count)) for i in indices]

        futures = [
            self._pool.submit(run_share, worker, share)
            for worker, share in zip(workers, shares, strict=True)
            if share
        ]
        ordered: list[FunctionResult | None] = [None] * len(specs)
        for future in futures:
            for index, result in future.result():
                ordered[index] = result
        return [result for result in ordered if result is not None]

    def _score_frame(self, spec: RewardFunctionSpec, batch_body: bytes) -> bytes:
        # The batch is encoded once and spliced into each function's request.
        head = json.dumps(
            {
                "op": "score",
                "function": spec.name,
                "timeout_s": self.settings.call_timeout_s,
                "log_limit": self.settings.log_limit_bytes,
            },
            separators=(",", ":"),
        ).encode()
        return frame_from_body(head[:-1] + b',"batch":' + batch_body + b"}")

    def _score_on(
        self, worker: SandboxWorker, spec: RewardFunctionSpec, frame: bytes, count: int
    ) -> FunctionResult:
        started = time.monotonic()

        def failed(kind: RewardErrorKind, message: str) -> FunctionResult:
            return FunctionResult(
                name=spec.name,
                version=spec.version,
                scores=[None] * count,
                errors=[RewardError(kind=kind, message=message)],
                duration_s=time.monotonic() - started,
            )

        if not worker.alive or worker.loaded_body != self._load_frame:
            problem = self._restart(worker)
            if problem is not None:
                return failed(RewardErrorKind.SANDBOX, problem)
        try:
            reply = worker.request(frame, self._hard_timeout_s())
        except WorkerFailure as failure:
            self._restart(worker)
            return failed(failure.kind, failure.message)
        try:
            result = _parse_score_reply(spec, reply, count)
        except ValueError as error:
            self._restart(worker)
            return failed(RewardErrorKind.SANDBOX, f"the sandbox process sent a bad reply: {error}")
        cpu_s = reply.get("cpu_s")
        worn_out = isinstance(cpu_s, int | float) and cpu_s > (
            CPU_RECYCLE_FRACTION * self.settings.cpu_time_limit_s
        )
        if worn_out or reply.get("stray_processes") is not False:
            self._restart(worker)
        return result

    def _restart(self, worker: SandboxWorker) -> str | None:
        """Replace the child and load the current functions; say what went wrong, if anything."""
        if self._closed:
            return "the sandbox is closed"
        try:
            worker.start()
        except SandboxUnavailableError as error:
            logger.error("%s could not restart: %s", worker.label, error)
            return f"the sandbox could not restart: {error}"
        if self._load_frame is None:
            return None
        try:
            reply = worker.request(self._load_frame, self._hard_load_timeout_s())
        except WorkerFailure as failure:
            return f"reloading the functions after a restart failed: {failure.message}"
        if reply.get("ok") is not True:
            return f"reloading the functions after a restart failed: {reply}"
        worker.loaded_body = self._load_frame
        return None

    def _hard_timeout_s(self) -> float:
        return self.settings.call_timeout_s + self.settings.kill_grace_s

    def _hard_load_timeout_s(self) -> float:
        return self.settings.effective_load_timeout_s + self.settings.kill_grace_s

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this sandbox is closed")

    def close(self) -> None:
        self._closed = True
        _kill_all(self._workers)
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None
        self._finalizer.detach()


def create_sandbox(settings: SandboxSettings) -> RewardSandbox:
    """The sandbox for `settings`; raises SandboxUnavailableError when bwrap cannot be used."""
    return ProcessSandbox(settings)


def _parse_score_reply(
    spec: RewardFunctionSpec, reply: dict[str, Any], count: int
) -> FunctionResult:
    """Turn the child's reply into a FunctionResult, trusting nothing in it: user code ran there."""
    if reply.get("ok") is not True:
        raise ValueError(str(reply.get("sandbox_error", "no scores"))[:2000])
    raw_scores = reply.get("scores")
    if not isinstance(raw_scores, list) or len(raw_scores) != count:
        raise ValueError("scores missing or of the wrong length")
    scores: list[float | None] = []
    for value in raw_scores:
        if value is None:
            scores.append(None)
        elif (
            isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        ):
            scores.append(float(value))
        else:
            raise ValueError(f"score {value!r} is not a finite number")
    errors = [_parse_error(raw, count) for raw in _list_of_dicts(reply.get("errors"))]
    logs = reply.get("logs")
    duration = reply.get("duration_s")
    return FunctionResult(
        name=spec.name,
        version=spec.version,
        scores=scores,
        errors=errors,
        logs=logs if isinstance(logs, str) else "",
        logs_truncated=reply.get("logs_truncated") is True,
        duration_s=float(duration) if isinstance(duration, int | float) else 0.0,
    )


def _list_of_dicts(value: object) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        raise ValueError("errors is not a list of objects")
    return value


def _parse_error(raw: dict[str, Any], count: int) -> RewardError:
    kind = RewardErrorKind(str(raw.get("kind")))
    index = raw.get("sample_index")
    if index is not None and (not isinstance(index, int) or not 0 <= index < count):
        raise ValueError(f"sample_index {index!r} out of range")
    trace = raw.get("traceback")
    return RewardError(
        kind=kind,
        message=str(raw.get("message", "")),
        traceback=trace if isinstance(trace, str) else None,
        sample_index=index,
    )
