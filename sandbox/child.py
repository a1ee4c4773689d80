"""The program that runs reward functions inside the sandbox.

It runs with only the standard library (and the job's own packages) visible, so it imports
nothing from this project; the parent imports its framing helpers instead of copying them.

Protocol: length-prefixed JSON frames (4-byte big-endian length, UTF-8 JSON) on the pipes the
parent gave as stdin and stdout. At startup both are moved to other descriptors and fds 0-2
are pointed away, so whatever user code prints or writes to fd 1 can never corrupt a frame.

Requests and replies:

- ``{"op": "load", "functions": [{name, source, entry, form, version, max_concurrency,
  sample_timeout_s, rate_limit_per_s}], "timeout_s"}`` -> ``{"ok": true}`` or
  ``{"ok": false, "errors": {name: traceback}}``; all or nothing.
- ``{"op": "score", "function", "timeout_s", "log_limit", "batch": {prompts, completions,
  examples, step}}`` -> ``{"ok": true, "scores", "errors", "logs", "logs_truncated",
  "duration_s", "cpu_s"}``.

The argument is a JSON object of resource limits and package paths, applied before any user
code runs; the first frame is ``{"env": {...}, "modules": {name: source}}`` (the job's
environment, and helper modules reward code may import, such as ``rft_reward``), answered by
``{"ok": true, "ready": true}``.

Per-sample functions are scored concurrently when they are slow: ``async def`` functions are
awaited together on one event loop, plain ones run in a bounded thread pool once a sample takes
longer than POOL_AFTER_SAMPLE_S (cheap functions stay on the main thread, where a pool would
only add overhead). Each sample has its own time limit beside the call's.
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import ctypes
import fcntl
import inspect
import io
import json
import linecache
import math
import os
import resource
import signal
import struct
import sys
import tempfile
import threading
import time
import traceback
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from concurrent.futures import Future, ThreadPoolExecutor

FRAME_HEADER = struct.Struct(">I")
# A reply holds at most a batch of scores, bounded logs and tracebacks; anything bigger is a
# corrupted or hostile stream, not a message.
MAX_FRAME_BYTES = 256 * 1024 * 1024
MAX_TRACEBACK_CHARS = 8 * 1024
# Descriptors far above what user code opens by accident, for the protocol pipes.
PROTOCOL_FD_FLOOR = 200
PR_SET_PDEATHSIG = 1
# A plain per-sample function moves to the thread pool once one sample takes this long: below
# it the function is CPU-bound or trivial, and threads would only add overhead under the GIL.
POOL_AFTER_SAMPLE_S = 0.002
# ...and only when its samples mostly wait: CPU time below this share of the wall time. A call
# to a remote judge uses ~1-3 %; CPU-bound code gets far more, even on a loaded host.
WAITING_SHARE = 0.1
# Threads scoring samples, per process (each job has its own processes). Threads count against
# RLIMIT_NPROC and their stacks against RLIMIT_AS, so both the count and the stack are capped.
MAX_SAMPLE_THREADS = 32
SAMPLE_THREAD_STACK_BYTES = 4 * 1024 * 1024
# glibc gives each thread that mallocs its own 64 MiB arena of address space; two arenas keep
# a pool of threads within the memory limit.
M_ARENA_MAX = -8
MALLOC_ARENAS = 2
# The call a print belongs to; threads a timed-out sample left running write under an old id,
# and their output is dropped instead of landing in the next call's logs.
CURRENT_CALL: contextvars.ContextVar[int] = contextvars.ContextVar("rft_current_call")
STDLIB_DIR = os.path.dirname(os.__file__)
# Files whose frames are ours, left out of the user's tracebacks (the agent child adds itself).
OUR_FILES = {__file__}


def encode_frame(message: dict[str, Any]) -> bytes:
    body = json.dumps(message, separators=(",", ":"), default=to_json_compatible).encode()
    return FRAME_HEADER.pack(len(body)) + body


def frame_from_body(body: bytes) -> bytes:
    return FRAME_HEADER.pack(len(body)) + body


def to_json_compatible(value: object) -> object:
    # Dataset rows can hold numpy scalars and arrays or datetimes; send what JSON can carry.
    to_list = getattr(value, "tolist", None)
    if callable(to_list):
        return to_list()
    if isinstance(value, bytes | bytearray):
        return value.decode("utf-8", "replace")
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    return str(value)


def _read_exact(fd: int, size: int) -> bytes | None:
    chunks = []
    while size:
        chunk = os.read(fd, min(size, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def _read_frame(fd: int) -> Any:
    header = _read_exact(fd, FRAME_HEADER.size)
    if header is None:
        return None
    (size,) = FRAME_HEADER.unpack(header)
    if size > MAX_FRAME_BYTES:
        raise ValueError(f"frame of {size} bytes exceeds the limit")
    body = _read_exact(fd, size)
    if body is None:
        return None
    return json.loads(body)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


class CallTimeout(BaseException):
    """Raised into user code by the soft timer; a BaseException so `except Exception` misses it."""


class BoundedLog(io.TextIOBase):
    """sys.stdout / sys.stderr for user code: keeps the first `limit` characters, drops the rest.

    Dropping in Python keeps a print flood cheap: nothing is copied past the limit.
    """

    def __init__(self) -> None:
        super().__init__()
        self.limit = 0
        self.parts: list[str] = []
        self.kept = 0
        self.dropped = 0
        self.call = 0
        self._lock = threading.Lock()  # samples of one call may print from several threads

    def reset(self, limit: int) -> None:
        """Start a new call's log; output from threads of earlier calls is dropped from now."""
        with self._lock:
            self.limit = limit
            self.parts = []
            self.kept = 0
            self.dropped = 0
            self.call += 1
        CURRENT_CALL.set(self.call)

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:  # type: ignore[override]
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        owner = CURRENT_CALL.get(None)
        with self._lock:
            if owner is not None and owner != self.call:
                return len(text)  # a thread abandoned by an earlier call
            room = self.limit - self.kept
            if room >= len(text):
                self.parts.append(text)
                self.kept += len(text)
            else:
                if room > 0:
                    self.parts.append(text[:room])
                    self.kept += room
                self.dropped += len(text) - max(room, 0)
        return len(text)

    def isatty(self) -> bool:
        return False

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return "utf-8"

    @property
    def buffer(self) -> BinaryLogView:
        return BinaryLogView(self)


class BinaryLogView:
    """sys.stdout.buffer for code that writes bytes."""

    def __init__(self, log: BoundedLog) -> None:
        self.log = log

    def write(self, data: bytes) -> int:
        self.log.write(bytes(data).decode("utf-8", "replace"))
        return len(data)

    def flush(self) -> None:
        pass


class RawOutputCapture:
    """Output written straight to fd 1/2 (C code, subprocesses): an unlinked file in /tmp.

    The size of that file is bounded by RLIMIT_FSIZE and, in the sandbox, by the /tmp size.
    """

    def __init__(self) -> None:
        self.fd, path = tempfile.mkstemp(prefix="rft-output-")
        os.unlink(path)
        # O_APPEND: after a truncate, every writer sharing the description appends from 0 again.
        fcntl.fcntl(self.fd, fcntl.F_SETFL, fcntl.fcntl(self.fd, fcntl.F_GETFL) | os.O_APPEND)

    def take(self, limit: int) -> tuple[str, int]:
        """Return up to `limit` characters written since the last call, and how many were cut."""
        size = os.fstat(self.fd).st_size
        if size == 0:
            return "", 0
        data = os.pread(self.fd, min(size, max(limit, 0) * 4), 0)
        os.ftruncate(self.fd, 0)
        text = data.decode("utf-8", "replace")[: max(limit, 0)]
        return text, max(size - len(text.encode()), 0)


class LoadedFunction:
    def __init__(self, name: str, function: Callable[..., Any], spec: dict[str, Any]) -> None:
        self.name = name
        self.function = function
        self.form: str = spec["form"]
        self.is_async = inspect.iscoroutinefunction(function)
        self.max_concurrency = max(1, int(spec.get("max_concurrency") or 1))
        sample_timeout = spec.get("sample_timeout_s")
        self.sample_timeout_s = float(sample_timeout) if sample_timeout else math.inf
        rate = spec.get("rate_limit_per_s")
        # The same limiter reward code gets from rft_reward (installed at startup).
        self.rate_limiter = sys.modules["rft_reward"].RateLimiter(float(rate)) if rate else None
        # Learned from the last batch: a slow plain function starts in the thread pool at once.
        self.slow = False
        self.takes_messages = False
        # A batch function without **kwargs gets only the keywords it names, so extra dataset
        # columns do not break a function written as f(prompts, completions).
        self.keywords: frozenset[str] | None = None
        try:
            parameters = list(inspect.signature(function).parameters.values())
        except (TypeError, ValueError):
            return
        # A per-sample function that names `messages` (or takes **kwargs) gets its sample's
        # conversation (_sample_extras).
        self.takes_messages = any(
            p.name == "messages" or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters
        )
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
            self.keywords = frozenset(
                p.name
                for p in parameters
                if p.kind
                in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
            )


class SampleTimer:
    """Limits of the samples scored on the main thread: the call's deadline, and each
    sample's own limit from its start."""

    def __init__(self, deadline: float, sample_limit: float, now: float) -> None:
        self.deadline = deadline
        self.sample_limit = sample_limit
        self.sample_started = now
        self.expired: str | None = None

    def next_check(self, now: float) -> float:
        return min(self.deadline, self.sample_started + self.sample_limit) - now

    def expired_now(self) -> bool:
        """Whether the call or the current sample is over its limit (and which, in expired)."""
        now = time.monotonic()
        if now >= self.deadline - 0.0005:
            self.expired = "call"
        elif now - self.sample_started >= self.sample_limit - 0.0005:
            self.expired = "sample"
        return self.expired is not None


class SampleOutcomes:
    """Scores and errors of one per-sample call, filled in as samples finish in any order."""

    def __init__(self, count: int) -> None:
        self.scores: list[float | None] = [None] * count
        self.errors: list[dict[str, Any]] = []
        self.finished = [False] * count
        self._lock = threading.Lock()

    def value(self, index: int, value: Any) -> None:
        score, problem = _to_score(value)
        with self._lock:
            self.scores[index] = score
            self.finished[index] = True
            if problem is not None:
                self.errors.append(_invalid_return(problem, index))

    def error(self, index: int, error: BaseException) -> None:
        with self._lock:
            self.finished[index] = True
            self.errors.append(_error("exception", error, index))

    def timeout(self, index: int, message: str) -> None:
        with self._lock:
            self.finished[index] = True
            self.errors.append(
                {"kind": "timeout", "message": message, "traceback": None, "sample_index": index}
            )

    def time_out_unfinished(self, message: str) -> None:
        for index, done in enumerate(self.finished):
            if not done:
                self.timeout(index, message)

    def sorted_errors(self) -> list[dict[str, Any]]:
        return sorted(self.errors, key=lambda error: error["sample_index"])


class RewardRunner:
    def __init__(self, own_pid_namespace: bool, sample_threads: int) -> None:
        self.own_pid_namespace = own_pid_namespace
        self.sample_threads = sample_threads
        self.functions: dict[str, LoadedFunction] = {}
        self._pool: ThreadPoolExecutor | None = None
        self._abandoned: list[Future[Any]] = []
        self._loop: Any = None  # asyncio's loop, made on first use
        self._loop_broken = False
        self._sample_timer: SampleTimer | None = None
        self.python_log = BoundedLog()
        self.raw_log = RawOutputCapture()
        sys.stdout = self.python_log
        sys.stderr = self.python_log
        signal.signal(signal.SIGALRM, self._on_alarm)

    def _on_alarm(self, signum: int, frame: object) -> None:
        timer = self._sample_timer
        if timer is None or timer.expired_now():
            raise CallTimeout
        self._arm(timer.next_check(time.monotonic()))

    def _arm(self, timeout_s: float) -> None:
        signal.setitimer(signal.ITIMER_REAL, max(timeout_s, 0.001))

    @staticmethod
    def _disarm() -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request.get("op")
        if op == "load":
            return self.load(request["functions"], float(request["timeout_s"]))
        if op == "score":
            return self.score(request)
        if op == "ping":
            return {"ok": True}
        return {"ok": False, "sandbox_error": f"unknown op {op!r}"}

    def load(self, specs: list[dict[str, Any]], timeout_s: float) -> dict[str, Any]:
        loaded: dict[str, LoadedFunction] = {}
        errors: dict[str, str] = {}
        for spec in specs:
            name = spec["name"]
            self.python_log.reset(0)
            try:
                self._arm(timeout_s)
                try:
                    loaded[name] = self._load_one(spec)
                finally:
                    self._disarm()
            except CallTimeout:
                errors[name] = f"loading took longer than {timeout_s:g} s"
            except BaseException as error:
                errors[name] = _format_user_traceback(error)
        self.raw_log.take(0)
        stray = self.has_stray_processes()
        if errors:
            return {"ok": False, "errors": errors, "stray_processes": stray}
        self.functions = loaded
        return {"ok": True, "stray_processes": stray}

    def has_stray_processes(self) -> bool:
        """Whether user code left processes running; the parent then replaces this one.

        The soft timer stops only this process: forked children would keep running (a fork
        bomb keeps spinning) unless the whole sandbox is killed.
        """
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        if self.own_pid_namespace:
            # Only bwrap's init and this process belong here.
            others = [
                pid
                for pid in os.listdir("/proc")
                if pid.isdigit() and int(pid) not in (1, os.getpid())
            ]
            return bool(others)
        try:
            for task in os.listdir("/proc/self/task"):
                with open(f"/proc/self/task/{task}/children") as handle:
                    if handle.read().strip():
                        return True
        except OSError:  # a kernel without CONFIG_PROC_CHILDREN: cannot tell, assume clean
            pass
        return False

    @staticmethod
    def _load_one(spec: dict[str, Any]) -> LoadedFunction:
        name, source = spec["name"], spec["source"]
        filename = f"<reward {name} v{spec.get('version', 1)}>"
        # Registering the source lets tracebacks show the user's lines.
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        module = types.ModuleType(f"rft_reward_{len(sys.modules)}")
        module.__file__ = filename
        # dataclasses and pickling look the defining module up in sys.modules.
        sys.modules[module.__name__] = module
        exec(compile(source, filename, "exec"), module.__dict__)
        function = module.__dict__.get(spec["entry"])
        if not callable(function):
            raise TypeError(f"{spec['entry']!r} is not a function after running the source")
        return LoadedFunction(name, function, spec)

    def score(self, request: dict[str, Any]) -> dict[str, Any]:
        loaded = self.functions.get(request["function"])
        if loaded is None:
            return {"ok": False, "sandbox_error": f"function {request['function']!r} is not loaded"}
        batch = request["batch"]
        log_limit = int(request["log_limit"])
        timeout_s = float(request["timeout_s"])
        self.python_log.reset(log_limit)
        started = time.perf_counter()
        deadline = time.monotonic() + timeout_s
        if loaded.form == "sample":
            scores, errors = self._score_samples(loaded, batch, deadline, timeout_s)
        else:
            scores, errors = self._score_batch(loaded, batch, deadline, timeout_s)
        duration = time.perf_counter() - started
        logs, truncated = self._collect_logs(log_limit)
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return {
            "stray_processes": self.has_stray_processes() or self._has_stray_threads(),
            "ok": True,
            "scores": scores,
            "errors": errors,
            "logs": logs,
            "logs_truncated": truncated,
            "duration_s": duration,
            "cpu_s": usage.ru_utime + usage.ru_stime,
        }

    def _score_samples(
        self, loaded: LoadedFunction, batch: dict[str, Any], deadline: float, timeout_s: float
    ) -> tuple[list[float | None], list[dict[str, Any]]]:
        outcomes = SampleOutcomes(len(batch["completions"]))
        call_message = f"the call took longer than {timeout_s:g} s"
        if loaded.is_async:
            self._await_samples(loaded, batch, outcomes, deadline, call_message)
        else:
            first = 0
            if not (loaded.slow and loaded.max_concurrency > 1):
                first = self._run_samples_here(loaded, batch, outcomes, deadline, call_message)
            if first < len(outcomes.scores):
                self._run_samples_in_threads(loaded, batch, first, outcomes, deadline, call_message)
        return outcomes.scores, outcomes.sorted_errors()

    def _run_samples_here(
        self,
        loaded: LoadedFunction,
        batch: dict[str, Any],
        outcomes: SampleOutcomes,
        deadline: float,
        call_message: str,
        first: int = 0,
        may_switch: bool = True,
    ) -> int:
        """Score samples first.. one by one on this thread, each under its own time limit.
        Returns the index to continue from in the thread pool once a sample proved slow (the
        count when done).

        One timer serves every sample: when it fires, the handler raises only if the current
        sample (or the call) is over its limit, and otherwise re-arms itself. This keeps a
        cheap function's cost per sample at one clock read.
        """
        prompts, completions, examples = batch["prompts"], batch["completions"], batch["examples"]
        extra = _sample_extras(loaded, batch)
        scores, errors, count = outcomes.scores, outcomes.errors, len(completions)
        function, limiter = loaded.function, loaded.rate_limiter
        sample_limit = loaded.sample_timeout_s
        switch_after = (
            POOL_AFTER_SAMPLE_S if may_switch and loaded.max_concurrency > 1 else math.inf
        )
        clock = time.monotonic
        stop, slow_samples = count, 0
        previous_start = loop_start = clock()
        loop_cpu_start = time.thread_time()
        timer = self._sample_timer = SampleTimer(deadline, sample_limit, previous_start)
        index = first
        try:
            self._arm(timer.next_check(previous_start))
            for index in range(first, count):
                if limiter is not None:
                    time.sleep(limiter.reserve())
                started = clock()
                if started - previous_start >= switch_after:
                    # Two slow samples in a row: one alone may be a cold start (an import,
                    # a regex compiled on first use), not a function that waits.
                    slow_samples += 1
                    if slow_samples == 2:
                        # Only a function that waits gains from threads; a CPU-bound one would
                        # hold the GIL all the same, with 32 times the memory in flight.
                        cpu = time.thread_time() - loop_cpu_start
                        if cpu < WAITING_SHARE * (started - loop_start):
                            loaded.slow = True
                            stop = index
                            break
                        switch_after = math.inf
                else:
                    slow_samples = 0
                previous_start = timer.sample_started = started
                try:
                    value = function(
                        prompts[index], completions[index], examples[index], **extra(index)
                    )
                except CallTimeout:
                    expired, timer.expired = timer.expired, None
                    if expired == "call":
                        raise
                    outcomes.timeout(index, f"the sample took longer than {sample_limit:g} s")
                    self._arm(timer.next_check(clock()))
                    continue
                except BaseException as error:
                    outcomes.error(index, error)
                    continue
                scores[index], problem = _to_score(value)
                if problem is not None:
                    errors.append(_invalid_return(problem, index))
        except CallTimeout:
            outcomes.finished[:index] = [True] * index
            outcomes.time_out_unfinished(call_message)
            return count
        finally:
            self._disarm()
            self._sample_timer = None
        outcomes.finished[:stop] = [True] * stop
        return stop

    def _sample_pool(self) -> ThreadPoolExecutor:
        # Imported on first use: it pulls in logging, ~6 ms of every process start, and
        # cheap functions never need a pool.
        from concurrent.futures import ThreadPoolExecutor

        if self._pool is None:
            threading.stack_size(SAMPLE_THREAD_STACK_BYTES)
            self._pool = ThreadPoolExecutor(self.sample_threads, thread_name_prefix="sample")
        return self._pool

    def _run_samples_in_threads(
        self,
        loaded: LoadedFunction,
        batch: dict[str, Any],
        first: int,
        outcomes: SampleOutcomes,
        deadline: float,
        call_message: str,
    ) -> None:
        """Score samples first.. on up to max_concurrency pool threads. A sample over its limit
        loses its score; its thread cannot be interrupted, so it is left behind and the
        process is replaced after this call (see _has_stray_threads)."""
        from concurrent.futures import FIRST_COMPLETED, wait

        prompts, completions, examples = batch["prompts"], batch["completions"], batch["examples"]
        extra = _sample_extras(loaded, batch)
        function, limiter = loaded.function, loaded.rate_limiter
        sample_limit = loaded.sample_timeout_s
        sample_message = f"the sample took longer than {sample_limit:g} s"
        started_at: list[float | None] = [None] * len(completions)
        durations: list[float] = []

        def score_one(index: int) -> Any:
            if limiter is not None:
                time.sleep(limiter.reserve())
            started_at[index] = time.monotonic()
            value = function(prompts[index], completions[index], examples[index], **extra(index))
            durations.append(time.monotonic() - started_at[index])  # type: ignore[operator]
            return value

        pool = self._sample_pool()
        width = min(loaded.max_concurrency, self.sample_threads)
        waiting = collections.deque(range(first, len(completions)))
        running: dict[Future[Any], int] = {}

        def fill() -> bool:
            """Submit up to the width; False when no thread could start (process limits)."""
            while len(running) < width and waiting:
                # A context per sample: one context cannot be entered by two threads at once.
                context = contextvars.copy_context()
                try:
                    running[pool.submit(context.run, score_one, waiting[0])] = waiting[0]
                except RuntimeError:
                    return False
                waiting.popleft()
            return True

        if not fill():
            width = max(len(running), 1)
        while running:
            now = time.monotonic()
            if now >= deadline:
                self._abandoned.extend(running)
                break
            wake = deadline
            for index in running.values():
                began = started_at[index]
                if began is not None:
                    wake = min(wake, began + sample_limit)
            done, _ = wait(running, timeout=max(wake - now, 0), return_when=FIRST_COMPLETED)
            for future in done:
                index = running.pop(future)
                error = future.exception()
                if error is None:
                    outcomes.value(index, future.result())
                else:
                    outcomes.error(index, error)
            now = time.monotonic()
            for future, index in list(running.items()):
                began = started_at[index]
                if began is not None and now - began >= sample_limit:
                    del running[future]
                    self._abandoned.append(future)
                    outcomes.timeout(index, sample_message)
            if not fill():
                width = max(len(running), 1)
        if waiting and time.monotonic() < deadline:
            # Not a single thread could start: score the rest on this thread.
            self._run_samples_here(
                loaded, batch, outcomes, deadline, call_message, waiting[0], may_switch=False
            )
        outcomes.time_out_unfinished(call_message)
        if durations and sum(durations) / len(durations) < POOL_AFTER_SAMPLE_S:
            loaded.slow = False

    def _has_stray_threads(self) -> bool:
        """Whether a timed-out sample's thread still runs: it holds a pool thread and may
        hold locks or memory, so the parent replaces this process."""
        self._abandoned = [future for future in self._abandoned if not future.done()]
        return bool(self._abandoned) or self._loop_broken

    def _event_loop(self) -> Any:
        import asyncio  # only jobs with async functions pay for the import

        if self._loop is None or self._loop.is_closed():
            # One loop for the life of the process: clients created on it (an async HTTP
            # client kept at module level) keep working from one batch to the next.
            self._loop = asyncio.new_event_loop()
            asyncio.set_event_loop(self._loop)
        return self._loop

    def _run_on_loop(self, coroutine: Any, deadline: float) -> Any:
        """Run `coroutine` under the call's deadline: cancelled at the deadline if it awaits,
        interrupted by the timer if it blocks the loop (the loop is then given up)."""
        import asyncio

        loop = self._event_loop()
        remaining = deadline - time.monotonic()
        guarded = asyncio.wait_for(coroutine, max(remaining, 0.001))
        try:
            # The timer fires a little after the deadline, so cooperative code is cancelled
            # cleanly first and only code that blocks the loop is interrupted.
            self._arm(remaining + 0.05)
            try:
                return loop.run_until_complete(guarded)
            finally:
                self._disarm()
        except CallTimeout:
            self._loop = None  # its tasks are in an unknown state; the process is replaced
            self._loop_broken = True
            raise

    def _await_samples(
        self,
        loaded: LoadedFunction,
        batch: dict[str, Any],
        outcomes: SampleOutcomes,
        deadline: float,
        call_message: str,
    ) -> None:
        import asyncio

        prompts, completions, examples = batch["prompts"], batch["completions"], batch["examples"]
        extra = _sample_extras(loaded, batch)
        function, limiter = loaded.function, loaded.rate_limiter
        sample_limit = None if math.isinf(loaded.sample_timeout_s) else loaded.sample_timeout_s
        sample_message = f"the sample took longer than {loaded.sample_timeout_s:g} s"

        async def score_one(index: int, gate: asyncio.Semaphore) -> None:
            async with gate:
                if limiter is not None:
                    await asyncio.sleep(limiter.reserve())
                try:
                    value = await asyncio.wait_for(
                        function(
                            prompts[index], completions[index], examples[index], **extra(index)
                        ),
                        sample_limit,
                    )
                except TimeoutError:
                    outcomes.timeout(index, sample_message)
                except asyncio.CancelledError:
                    raise
                except BaseException as error:
                    outcomes.error(index, error)
                else:
                    outcomes.value(index, value)

        async def score_all() -> None:
            gate = asyncio.Semaphore(loaded.max_concurrency)
            await asyncio.gather(*(score_one(index, gate) for index in range(len(completions))))

        with contextlib.suppress(TimeoutError, CallTimeout):
            self._run_on_loop(score_all(), deadline)
        outcomes.time_out_unfinished(call_message)

    def _score_batch(
        self, loaded: LoadedFunction, batch: dict[str, Any], deadline: float, timeout_s: float
    ) -> tuple[list[float | None], list[dict[str, Any]]]:
        count = len(batch["completions"])
        nothing: list[float | None] = [None] * count
        arguments = _batch_arguments(batch)
        if loaded.keywords is not None:
            arguments = {key: value for key, value in arguments.items() if key in loaded.keywords}
        if loaded.rate_limiter is not None:
            time.sleep(min(loaded.rate_limiter.reserve(), max(deadline - time.monotonic(), 0)))
        try:
            if loaded.is_async:
                values = self._run_on_loop(loaded.function(**arguments), deadline)
            else:
                self._arm(deadline - time.monotonic())
                try:
                    values = loaded.function(**arguments)
                finally:
                    self._disarm()
            return _to_batch_scores(values, count)
        except (CallTimeout, TimeoutError):
            message = f"the call took longer than {timeout_s:g} s"
            return nothing, [
                {"kind": "timeout", "message": message, "traceback": None, "sample_index": None}
            ]
        except BaseException as error:
            return nothing, [_error("exception", error, None)]

    def _collect_logs(self, limit: int) -> tuple[str, bool]:
        log = self.python_log
        raw, raw_dropped = self.raw_log.take(limit - log.kept)
        dropped = log.dropped + raw_dropped
        text = "".join(log.parts) + raw
        if dropped:
            text += f"\n[output truncated: {dropped} more characters]\n"
        log.reset(0)
        return text, dropped > 0


def _sample_extras(
    loaded: LoadedFunction, batch: dict[str, Any]
) -> Callable[[int], dict[str, Any]]:
    """The keyword arguments of sample i beyond (prompt, completion, example): `messages`
    for a function that takes them, in every job (the README's f(prompt, completion, example,
    messages) must run wherever it is scored, pre-flight included)."""
    if not loaded.takes_messages:
        return lambda index: {}
    trajectories = batch.get("trajectories")
    if trajectories:
        return lambda index: {"messages": trajectories[index]}
    # A job without tools: its completion is one assistant turn, as TRL passes a
    # conversational completion to a batch function.
    completions = batch["completions"]
    return lambda index: {"messages": [{"role": "assistant", "content": completions[index]}]}


def _batch_arguments(batch: dict[str, Any]) -> dict[str, Any]:
    prompts = batch["prompts"]
    completions: list[Any] = batch["completions"]
    if batch.get("trajectories"):
        # Agent rollouts: the whole conversation, tool calls and results included, as TRL
        # passes a tool-using rollout's completion.
        completions = batch["trajectories"]
    elif prompts and isinstance(prompts[0], list):
        # TRL passes conversational completions as a one-message conversation.
        completions = [[{"role": "assistant", "content": text}] for text in completions]
    arguments: dict[str, Any] = {}
    examples: list[dict[str, Any]] = batch["examples"]
    for example in examples:
        for key in example:
            # TRL leaves these out of the columns: they arrive as prompts and completions.
            if key not in arguments and key not in ("prompt", "completion", "completion_ids"):
                arguments[key] = [row.get(key) for row in examples]
    arguments["prompts"] = prompts
    arguments["completions"] = completions
    return arguments


def _to_score(value: Any) -> tuple[float | None, str | None]:
    """Convert one returned value to a score, or say why it is not one."""
    if value is None:
        return None, None
    if isinstance(value, bool):
        return float(value), None
    if isinstance(value, str | bytes | bytearray):
        return None, f"returned {type(value).__name__} {_short_repr(value)}, not a number"
    try:
        number = float(value)  # also numpy scalars, Decimal, Fraction, 0-d tensors
    except (TypeError, ValueError, OverflowError):
        return None, f"returned {type(value).__name__} {_short_repr(value)}, not a number"
    if not math.isfinite(number):
        return None, f"returned {number}, not a finite number"
    return number, None


def _to_batch_scores(values: Any, count: int) -> tuple[list[float | None], list[dict[str, Any]]]:
    nothing: list[float | None] = [None] * count
    if isinstance(values, str | bytes | dict) or not hasattr(values, "__iter__"):
        problem = f"returned {type(values).__name__} {_short_repr(values)}, not a list of numbers"
        return nothing, [_invalid_return(problem, None)]
    values = list(values)
    if len(values) != count:
        message = f"returned {len(values)} scores for {count} completions"
        return nothing, [
            {"kind": "wrong_length", "message": message, "traceback": None, "sample_index": None}
        ]
    scores: list[float | None] = []
    errors: list[dict[str, Any]] = []
    for index, value in enumerate(values):
        score, issue = _to_score(value)
        scores.append(score)
        if issue is not None:
            errors.append(_invalid_return(f"score {index} {issue}", index))
    return scores, errors


def _invalid_return(message: str, index: int | None) -> dict[str, Any]:
    return {"kind": "invalid_return", "message": message, "traceback": None, "sample_index": index}


def _error(kind: str, error: BaseException, index: int | None) -> dict[str, Any]:
    return {
        "kind": kind,
        "message": f"{type(error).__name__}: {error}"[:1000],
        "traceback": _format_user_traceback(error),
        "sample_index": index,
    }


def _format_user_traceback(error: BaseException) -> str:
    """The traceback as the user should read it: only frames of their code (and of what their
    code called). Our own files' frames go wherever they are (the details name the user's
    lines only, never /opt/rft/...), and so do the thread pool's or asyncio's that call the
    user's function for us. An error raised by our code about theirs (a call with missing
    arguments) keeps its message, without frames."""
    report = traceback.TracebackException.from_exception(error)
    seen: set[int] = set()
    pending = [report]
    while pending:
        part = pending.pop()
        if id(part) in seen:
            continue
        seen.add(id(part))
        frames = list(part.stack)
        start = 0
        while start < len(frames) and _is_caller_frame(frames[start].filename):
            start += 1
        part.stack = traceback.StackSummary.from_list(
            [frame for frame in frames[start:] if frame.filename not in OUR_FILES]
        )
        pending += [p for p in (part.__cause__, part.__context__) if p is not None]
        pending += part.exceptions or []
    text = "".join(report.format())
    if len(text) > MAX_TRACEBACK_CHARS:
        text = text[: MAX_TRACEBACK_CHARS // 2] + "\n...\n" + text[-MAX_TRACEBACK_CHARS // 2 :]
    return text


def _is_caller_frame(filename: str) -> bool:
    return filename in OUR_FILES or filename.startswith(STDLIB_DIR)


def _install_modules(sources: dict[str, str]) -> None:
    """Helper modules shipped with the sandbox (rft_reward), importable by reward code."""
    for name, source in sources.items():
        filename = f"<{name}>"
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        module = types.ModuleType(name)
        module.__file__ = filename
        sys.modules[name] = module
        exec(compile(source, filename, "exec"), module.__dict__)


def _limit_malloc_arenas() -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).mallopt(M_ARENA_MAX, MALLOC_ARENAS)


def _short_repr(value: object) -> str:
    try:
        text = repr(value)
    except Exception:
        text = f"<{type(value).__name__}>"
    return text if len(text) <= 80 else text[:77] + "..."


def _apply_limits(limits: dict[str, int]) -> None:
    """Set soft = hard so user code cannot raise them back (it has no CAP_SYS_RESOURCE)."""
    names = {
        "memory_bytes": resource.RLIMIT_AS,
        "cpu_seconds": resource.RLIMIT_CPU,
        "processes": resource.RLIMIT_NPROC,
        "open_files": resource.RLIMIT_NOFILE,
        "file_bytes": resource.RLIMIT_FSIZE,
    }
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    for key, which in names.items():
        value = limits.get(key)
        if value is None:
            continue
        _, hard = resource.getrlimit(which)
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        resource.setrlimit(which, (value, value))


def _die_with_parent(expected_parent: int | None) -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if expected_parent is not None and os.getppid() != expected_parent:
        os._exit(1)  # the parent died before the prctl took effect


def _take_protocol_pipes() -> tuple[int, int]:
    protocol_in = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, PROTOCOL_FD_FLOOR)
    protocol_out = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, PROTOCOL_FD_FLOOR)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    return protocol_in, protocol_out


THREAD_COUNT_VARIABLES = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)
SINGLE_THREADED_LIBRARIES = dict.fromkeys(THREAD_COUNT_VARIABLES, "1")


# Every name HTTP clients read a proxy from (httpx, requests and urllib read both cases;
# ALL_PROXY covers clients that know no per-scheme variable).
PROXY_VARIABLES = (
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
)
FORWARD_CHUNK = 64 * 1024
# Bytes queued towards one side before the other side stops being read (backpressure).
FORWARD_BUFFER = 256 * 1024
FORWARDER_STACK_BYTES = 512 * 1024


def _start_egress_forwarder(socket_path: str) -> None:
    """The sandbox's way out when the job asked for the network (sandbox/egress.py): a TCP
    listener on the sandbox's own loopback that hands each connection to the egress proxy's
    unix socket, and the proxy variables pointing at it, set before any user code loads and
    inherited by every process it starts. One thread serves every connection: threads count
    against the sandbox's process limits."""
    import selectors
    import socket

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    listener.setblocking(False)
    proxy = f"http://127.0.0.1:{listener.getsockname()[1]}"
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    # socket -> [its peer, bytes queued for the peer, whether it has stopped sending]
    ends: dict[socket.socket, list[Any]] = {}

    def close_pair(side: socket.socket) -> None:
        for end in (side, ends[side][0]):
            with contextlib.suppress(KeyError, ValueError):
                selector.unregister(end)
            ends.pop(end, None)
            end.close()

    def update(side: socket.socket) -> None:
        peer, queued, finished = ends[side]
        events = 0
        if not finished and len(queued) < FORWARD_BUFFER:
            events |= selectors.EVENT_READ
        if ends[peer][1]:
            events |= selectors.EVENT_WRITE
        with contextlib.suppress(KeyError):
            selector.unregister(side)
        if events:
            selector.register(side, events)

    def serve() -> None:
        while True:
            for key, events in selector.select():
                side: socket.socket = key.fileobj  # type: ignore[assignment]
                if side is listener:
                    with contextlib.suppress(OSError):
                        client, _ = listener.accept()
                        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                        try:
                            upstream.connect(socket_path)
                        except OSError:
                            client.close()
                            upstream.close()
                            continue
                        for end, peer in ((client, upstream), (upstream, client)):
                            end.setblocking(False)
                            ends[end] = [peer, bytearray(), False]
                            selector.register(end, selectors.EVENT_READ)
                    continue
                if side not in ends:
                    continue
                peer = ends[side][0]
                try:
                    if events & selectors.EVENT_WRITE:
                        pending = ends[peer][1]
                        del pending[: side.send(pending)]
                        if not pending and ends[peer][2]:
                            side.shutdown(socket.SHUT_WR)
                    if events & selectors.EVENT_READ:
                        data = side.recv(FORWARD_CHUNK)
                        if data:
                            ends[side][1] += data
                        else:
                            ends[side][2] = True
                            if not ends[side][1]:
                                peer.shutdown(socket.SHUT_WR)
                except (BlockingIOError, InterruptedError):
                    pass
                except OSError:
                    close_pair(side)
                    continue
                if ends[side][2] and ends[peer][2] and not ends[side][1] and not ends[peer][1]:
                    close_pair(side)
                    continue
                update(side)
                update(peer)

    # A small stack: the default 8 MiB would count against the address-space limit.
    previous = threading.stack_size(FORWARDER_STACK_BYTES)
    try:
        threading.Thread(target=serve, name="rft-egress-forwarder", daemon=True).start()
    finally:
        threading.stack_size(previous)
    for name in PROXY_VARIABLES:
        os.environ[name] = proxy
    # Nothing bypasses the proxy: there is nothing else to reach.
    os.environ.pop("NO_PROXY", None)
    os.environ.pop("no_proxy", None)


class Runner(Protocol):
    """What main() serves requests with: the reward runner, or another program's (the agent
    child's) built by the same startup, so both share pipes, limits and the first frame."""

    raw_log: RawOutputCapture

    def handle(self, request: dict[str, Any]) -> dict[str, Any]: ...


def main(make_runner: Callable[..., Runner] | None = None) -> None:
    """Serve requests with ``make_runner(own_pid_namespace=, sample_threads=)`` (by default
    the reward runner) once the pipes, the job's environment and the limits are in place."""
    protocol_in, protocol_out = _take_protocol_pipes()
    limits = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    # Inside bwrap the parent is the namespace's init, which --die-with-parent already covers.
    _die_with_parent(limits.pop("parent_pid", None))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C in the worker's terminal is not ours
    python_paths = limits.pop("python_paths", [])
    for path in reversed(python_paths):
        sys.path.insert(0, path)
    if python_paths:
        # Python processes the code starts (`python -m pytest`) import the job's packages too;
        # this process runs with -I, which ignores the variable.
        os.environ["PYTHONPATH"] = os.pathsep.join(python_paths)
    # The job's environment arrives over the pipe so its secrets never sit on a command line.
    configuration = _read_frame(protocol_in)
    if configuration is None:
        return
    # One thread per numeric library unless the job says otherwise: each reward process scores
    # one batch at a time beside the trainer, and a BLAS pool sized for a 64-core host would
    # reserve more address space than the memory limit allows.
    os.environ.update(SINGLE_THREADED_LIBRARIES)
    os.environ.update(configuration.get("env", {}))
    egress_socket = limits.pop("egress_socket", None)
    if egress_socket:
        # After the job's environment: its own proxy variables could point nowhere else.
        _start_egress_forwarder(egress_socket)
    _limit_malloc_arenas()
    _install_modules(configuration.get("modules", {}))
    # Threads count against RLIMIT_NPROC: leave half of it to the code's own processes.
    process_limit = limits.get("processes")
    sample_threads = MAX_SAMPLE_THREADS
    if process_limit:
        sample_threads = max(1, min(sample_threads, int(process_limit) // 2))
    runner = (make_runner or RewardRunner)(
        own_pid_namespace=bool(limits.pop("own_pid_namespace", False)),
        sample_threads=sample_threads,
    )
    # From here on, anything written to fd 1 or 2 lands in the capture file.
    os.dup2(runner.raw_log.fd, 1)
    os.dup2(runner.raw_log.fd, 2)
    _apply_limits(limits)
    _write_all(protocol_out, encode_frame({"ok": True, "ready": True, "pid": os.getpid()}))
    while True:
        request = _read_frame(protocol_in)
        if request is None:
            return
        try:
            reply = runner.handle(request)
        except BaseException as error:  # our side failed: say so rather than die silently
            reply = {"ok": False, "sandbox_error": _format_user_traceback(error)}
        _write_all(protocol_out, encode_frame(reply))


if __name__ == "__main__":
    main()
