"""The program that runs reward functions inside the sandbox.

It runs with only the standard library (and the job's own packages) visible, so it imports
nothing from this project; the parent imports its framing helpers instead of copying them.

Protocol: length-prefixed JSON frames (4-byte big-endian length, UTF-8 JSON) on the pipes the
parent gave as stdin and stdout. At startup both are moved to other descriptors and fds 0-2
are pointed away, so whatever user code prints or writes to fd 1 can never corrupt a frame.

Requests and replies:

- ``{"op": "load", "functions": [{name, source, entry, form, version}], "timeout_s"}``
  -> ``{"ok": true}`` or ``{"ok": false, "errors": {name: traceback}}``; all or nothing.
- ``{"op": "score", "function", "timeout_s", "log_limit", "batch": {prompts, completions,
  examples, step}}`` -> ``{"ok": true, "scores", "errors", "logs", "logs_truncated",
  "duration_s", "cpu_s"}``.

The argument is a JSON object of resource limits and package paths, applied before any user
code runs; the first frame is ``{"env": {...}}``, answered by ``{"ok": true, "ready": true}``.
"""

from __future__ import annotations

import contextlib
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
import time
import traceback
import types
from collections.abc import Callable
from typing import Any

FRAME_HEADER = struct.Struct(">I")
# A reply holds at most a batch of scores, bounded logs and tracebacks; anything bigger is a
# corrupted or hostile stream, not a message.
MAX_FRAME_BYTES = 256 * 1024 * 1024
MAX_TRACEBACK_CHARS = 8 * 1024
# Descriptors far above what user code opens by accident, for the protocol pipes.
PROTOCOL_FD_FLOOR = 200
PR_SET_PDEATHSIG = 1


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

    def reset(self, limit: int) -> None:
        self.limit = limit
        self.parts = []
        self.kept = 0
        self.dropped = 0

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:  # type: ignore[override]
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
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
    def __init__(self, name: str, function: Callable[..., Any], form: str) -> None:
        self.name = name
        self.function = function
        self.form = form
        # A batch function without **kwargs gets only the keywords it names, so extra dataset
        # columns do not break a function written as f(prompts, completions).
        self.keywords: frozenset[str] | None = None
        try:
            parameters = inspect.signature(function).parameters.values()
        except (TypeError, ValueError):
            return
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
            self.keywords = frozenset(
                p.name
                for p in parameters
                if p.kind
                in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
            )


class RewardRunner:
    def __init__(self, own_pid_namespace: bool) -> None:
        self.own_pid_namespace = own_pid_namespace
        self.functions: dict[str, LoadedFunction] = {}
        self.python_log = BoundedLog()
        self.raw_log = RawOutputCapture()
        sys.stdout = self.python_log
        sys.stderr = self.python_log
        signal.signal(signal.SIGALRM, self._on_alarm)

    @staticmethod
    def _on_alarm(signum: int, frame: object) -> None:
        raise CallTimeout

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
        return LoadedFunction(name, function, spec["form"])

    def score(self, request: dict[str, Any]) -> dict[str, Any]:
        loaded = self.functions.get(request["function"])
        if loaded is None:
            return {"ok": False, "sandbox_error": f"function {request['function']!r} is not loaded"}
        batch = request["batch"]
        log_limit = int(request["log_limit"])
        timeout_s = float(request["timeout_s"])
        self.python_log.reset(log_limit)
        started = time.perf_counter()
        if loaded.form == "sample":
            scores, errors = self._score_samples(loaded, batch, timeout_s)
        else:
            scores, errors = self._score_batch(loaded, batch, timeout_s)
        duration = time.perf_counter() - started
        logs, truncated = self._collect_logs(log_limit)
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return {
            "stray_processes": self.has_stray_processes(),
            "ok": True,
            "scores": scores,
            "errors": errors,
            "logs": logs,
            "logs_truncated": truncated,
            "duration_s": duration,
            "cpu_s": usage.ru_utime + usage.ru_stime,
        }

    def _score_samples(
        self, loaded: LoadedFunction, batch: dict[str, Any], timeout_s: float
    ) -> tuple[list[float | None], list[dict[str, Any]]]:
        prompts, completions, examples = batch["prompts"], batch["completions"], batch["examples"]
        scores: list[float | None] = [None] * len(completions)
        errors: list[dict[str, Any]] = []
        function = loaded.function
        index = 0
        try:
            self._arm(timeout_s)
            try:
                for index in range(len(completions)):
                    try:
                        value = function(prompts[index], completions[index], examples[index])
                        scores[index], problem = _to_score(value)
                    except CallTimeout:
                        raise
                    except BaseException as error:
                        errors.append(_error("exception", error, index))
                        continue
                    if problem is not None:
                        errors.append(_invalid_return(problem, index))
            finally:
                self._disarm()
        except CallTimeout:
            message = f"the call took longer than {timeout_s:g} s"
            for unfinished in range(index, len(completions)):
                scores[unfinished] = None
                errors.append(
                    {
                        "kind": "timeout",
                        "message": message,
                        "traceback": None,
                        "sample_index": unfinished,
                    }
                )
        return scores, errors

    def _score_batch(
        self, loaded: LoadedFunction, batch: dict[str, Any], timeout_s: float
    ) -> tuple[list[float | None], list[dict[str, Any]]]:
        count = len(batch["completions"])
        nothing: list[float | None] = [None] * count
        arguments = _batch_arguments(batch)
        if loaded.keywords is not None:
            arguments = {key: value for key, value in arguments.items() if key in loaded.keywords}
        try:
            self._arm(timeout_s)
            try:
                values = loaded.function(**arguments)
                return _to_batch_scores(values, count)
            finally:
                self._disarm()
        except CallTimeout:
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


def _batch_arguments(batch: dict[str, Any]) -> dict[str, Any]:
    prompts = batch["prompts"]
    completions: list[Any] = batch["completions"]
    if prompts and isinstance(prompts[0], list):
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
    # Our own frames (the callers of the user's function) are noise to the user.
    trace = error.__traceback__
    while trace is not None and trace.tb_frame.f_code.co_filename == __file__:
        trace = trace.tb_next
    if trace is None:  # the error is in our own code: show all of it
        trace = error.__traceback__
    text = "".join(traceback.format_exception(type(error), error, trace))
    if len(text) > MAX_TRACEBACK_CHARS:
        text = text[: MAX_TRACEBACK_CHARS // 2] + "\n...\n" + text[-MAX_TRACEBACK_CHARS // 2 :]
    return text


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


def main() -> None:
    protocol_in, protocol_out = _take_protocol_pipes()
    limits = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    # Inside bwrap the parent is the namespace's init, which --die-with-parent already covers.
    _die_with_parent(limits.pop("parent_pid", None))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C in the worker's terminal is not ours
    for path in reversed(limits.pop("python_paths", [])):
        sys.path.insert(0, path)
    # The job's environment arrives over the pipe so its secrets never sit on a command line.
    configuration = _read_frame(protocol_in)
    if configuration is None:
        return
    # One thread per numeric library unless the job says otherwise: each reward process scores
    # one batch at a time beside the trainer, and a BLAS pool sized for a 64-core host would
    # reserve more address space than the memory limit allows.
    os.environ.update(SINGLE_THREADED_LIBRARIES)
    os.environ.update(configuration.get("env", {}))
    runner = RewardRunner(own_pid_namespace=bool(limits.pop("own_pid_namespace", False)))
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
