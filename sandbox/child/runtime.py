"""The runtime every sandbox child program is built on: startup, logs, limits, tracebacks.

A child program (reward_child.py, agent_child.py) is started by start.py inside the sandbox
and serves requests with a runner of its own; everything else is this module's: at startup the
protocol pipes (fds 0 and 1) are moved to other descriptors and fds 0-2 pointed away, so
whatever user code prints or writes to fd 1 can never corrupt a frame (framing.py); the
argument is a JSON object of resource limits and package paths, applied before any user code
runs; the first frame is ``{"env": {...}, "modules": {name: source}}`` (the job's environment,
and helper modules user code may import, such as ``rft_reward``), answered by
``{"ok": true, "ready": true}``. Then each request frame gets the runner's reply frame.

It runs with only the standard library (and the job's own packages) visible, so this package
imports nothing from the rest of the project.
"""

from __future__ import annotations

import contextlib
import contextvars
import ctypes
import fcntl
import io
import json
import linecache
import math
import os
import resource
import signal
import sys
import tempfile
import threading
import traceback
import types
from collections.abc import Callable
from typing import Any, Protocol

from .egress_forwarder import start_egress_forwarder
from .framing import encode_frame, read_frame, write_all

MAX_TRACEBACK_CHARS = 8 * 1024
# Descriptors far above what user code opens by accident, for the protocol pipes.
PROTOCOL_FD_FLOOR = 200
PR_SET_PDEATHSIG = 1
# Threads running user code, per process (each job has its own processes). Threads count
# against RLIMIT_NPROC and their stacks against RLIMIT_AS, so both the count and the stack are
# capped.
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
# The folder of the child programs (this package): its frames are ours, left out of the user's
# tracebacks.
OUR_FOLDER = os.path.dirname(os.path.abspath(__file__)) + os.sep


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


def to_score(value: Any) -> tuple[float | None, str | None]:
    """Convert one returned value to a score, or say why it is not one."""
    if value is None:
        return None, None
    if isinstance(value, bool):
        return float(value), None
    if isinstance(value, str | bytes | bytearray):
        return None, f"returned {type(value).__name__} {short_repr(value)}, not a number"
    try:
        number = float(value)  # also numpy scalars, Decimal, Fraction, 0-d tensors
    except (TypeError, ValueError, OverflowError):
        return None, f"returned {type(value).__name__} {short_repr(value)}, not a number"
    if not math.isfinite(number):
        return None, f"returned {number}, not a finite number"
    return number, None


def format_user_traceback(error: BaseException) -> str:
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
            [frame for frame in frames[start:] if not _is_ours(frame.filename)]
        )
        pending += [p for p in (part.__cause__, part.__context__) if p is not None]
        pending += part.exceptions or []
    text = "".join(report.format())
    if len(text) > MAX_TRACEBACK_CHARS:
        text = text[: MAX_TRACEBACK_CHARS // 2] + "\n...\n" + text[-MAX_TRACEBACK_CHARS // 2 :]
    return text


def _is_ours(filename: str) -> bool:
    return filename.startswith(OUR_FOLDER)


def _is_caller_frame(filename: str) -> bool:
    return _is_ours(filename) or filename.startswith(STDLIB_DIR)


def run_source(
    module_name: str, filename: str, source: str, dont_inherit: bool = False
) -> types.ModuleType:
    """Run `source` as the module `module_name`, its code named `filename` in tracebacks.

    Without `dont_inherit` it compiles under this file's future flags (``from __future__ import
    annotations``), as reward code and the helper modules always have; tool and environment
    code compiles under none."""
    # Registering the source lets tracebacks show the user's lines.
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    module = types.ModuleType(module_name)
    module.__file__ = filename
    # dataclasses and pickling look the defining module up in sys.modules.
    sys.modules[module_name] = module
    exec(compile(source, filename, "exec", dont_inherit=dont_inherit), module.__dict__)
    return module


def _install_modules(sources: dict[str, str]) -> None:
    """Helper modules shipped with the sandbox (rft_reward), importable by reward code."""
    for name, source in sources.items():
        run_source(name, f"<{name}>", source)


def _limit_malloc_arenas() -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).mallopt(M_ARENA_MAX, MALLOC_ARENAS)


def short_repr(value: object) -> str:
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


class Runner(Protocol):
    """What serve() serves requests with: each child program's own (the reward runner, the
    agent runner), built by the same startup, so both share pipes, limits and the first frame."""

    raw_log: RawOutputCapture

    def handle(self, request: dict[str, Any]) -> dict[str, Any]: ...


def serve(make_runner: Callable[..., Runner]) -> None:
    """Serve requests with ``make_runner(own_pid_namespace=, sample_threads=)`` once the
    pipes, the job's environment and the limits are in place."""
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
    configuration = read_frame(protocol_in)
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
        start_egress_forwarder(egress_socket)
    _limit_malloc_arenas()
    _install_modules(configuration.get("modules", {}))
    # Threads count against RLIMIT_NPROC: leave half of it to the code's own processes.
    process_limit = limits.get("processes")
    sample_threads = MAX_SAMPLE_THREADS
    if process_limit:
        sample_threads = max(1, min(sample_threads, int(process_limit) // 2))
    runner = make_runner(
        own_pid_namespace=bool(limits.pop("own_pid_namespace", False)),
        sample_threads=sample_threads,
    )
    # From here on, anything written to fd 1 or 2 lands in the capture file.
    os.dup2(runner.raw_log.fd, 1)
    os.dup2(runner.raw_log.fd, 2)
    _apply_limits(limits)
    write_all(protocol_out, encode_frame({"ok": True, "ready": True, "pid": os.getpid()}))
    while True:
        request = read_frame(protocol_in)
        if request is None:
            return
        try:
            reply = runner.handle(request)
        except BaseException as error:  # our side failed: say so rather than die silently
            reply = {"ok": False, "sandbox_error": format_user_traceback(error)}
        write_all(protocol_out, encode_frame(reply))
