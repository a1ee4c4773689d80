"""The steps of an agent child's request: one piece of user code each, and its outcome's error.

Standard library only: it runs inside the sandbox, beside agent_child.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .runtime import CallTimeout, format_user_traceback

if TYPE_CHECKING:
    from .agent_child import LoadedEnvironment

ROLLOUT_LOST = (
    "rollout {!r} is not open: its reset failed, it was closed, new code was loaded, or the "
    "sandbox process restarted"
)


class Step:
    """One piece of user code to run: a tool call, a reset or a get_reward. `function` is
    None when the step failed before running (its error is set)."""

    def __init__(
        self,
        chain: object,
        function: Callable[..., Any] | None = None,
        arguments: dict[str, Any] | None = None,
        is_async: bool = False,
        error: dict[str, Any] | None = None,
    ) -> None:
        self.chain = chain  # steps with the same chain run in order
        self.function = function
        self.arguments = arguments or {}
        self.is_async = is_async
        self.error = error
        self.value: Any = None
        self.duration_s = 0.0
        self.logs = ""
        self.environment: LoadedEnvironment | None = None  # of a reset


class ThreadedStep:
    """A plain function on a thread of its own, which a timeout interrupts by raising
    CallTimeout into it (effective at its next Python instruction)."""

    def __init__(self, step: Step, loop: asyncio.AbstractEventLoop, future: asyncio.Future[Any]):
        self.step = step
        self.loop = loop
        self.future = future
        self.lock = threading.Lock()
        self.thread_id: int | None = None
        self.finished = False
        self.abandoned = False
        self.thread: threading.Thread | None = None

    def run(self) -> None:
        with self.lock:
            if self.abandoned:
                return
            self.thread_id = threading.get_ident()
        value: Any = None
        error: BaseException | None = None
        try:
            assert self.step.function is not None
            value = self.step.function(**self.step.arguments)
        except BaseException as raised:
            error = raised
        with self.lock:
            self.finished = True
            if self.abandoned:
                return
        # The loop may already be closed when a late thread finishes.
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(settle, self.future, value, error)

    def interrupt(self) -> None:
        with self.lock:
            self.abandoned = True
            if self.finished or self.thread_id is None:
                return
            ctypes.pythonapi.PyThreadState_SetAsyncExc(
                ctypes.c_ulong(self.thread_id), ctypes.py_object(CallTimeout)
            )


def settle(future: asyncio.Future[Any], value: Any, error: BaseException | None) -> None:
    if future.done():
        return
    if error is None:
        future.set_result(value)
    else:
        future.set_exception(error)


def quiet_thread_exceptions(arguments: threading.ExceptHookArgs) -> None:
    # A CallTimeout that reached an abandoned thread after its function returned ends the
    # thread; it is nobody's error.
    if arguments.exc_type is not CallTimeout:
        threading.__excepthook__(arguments)


def step_error(kind: str, message: str, traceback: str | None = None) -> dict[str, Any]:
    return {"kind": kind, "message": message[:2000], "traceback": traceback}


def rollout_lost(rollout_id: object) -> dict[str, Any]:
    return step_error("environment_lost", ROLLOUT_LOST.format(rollout_id))


# Kinds an exception may name for itself (sandbox/endpoint_runtime.py: an HTTP tool's endpoint
# failed); any other exception is "exception".
ENDPOINT_ERROR_KINDS = frozenset({"timeout", "http_status", "malformed_response", "connection"})


def exception_error(error: BaseException) -> dict[str, Any]:
    kind = getattr(error, "rft_tool_error_kind", None)
    if isinstance(kind, str) and kind in ENDPOINT_ERROR_KINDS:
        return step_error(kind, str(error))
    return step_error("exception", f"{type(error).__name__}: {error}", format_user_traceback(error))


class ThreadStartError(Exception):
    pass
