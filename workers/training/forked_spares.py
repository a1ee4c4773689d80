"""The worker's side of the spare template (``workers.training.spare_template``): start it,
have it fork spares, and know when each one ends.

A forked spare is the template's child, not the worker's: the worker holds its pid (it stops
the spare's process group as any spare's), the write end of its stdin (the job folder goes
there), and learns its exit code from the template. ``ForkedSpare`` gives the launcher the part
of ``subprocess.Popen`` it uses (``TrainingProcess``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import socket
import subprocess
import sys
import threading
import time
from typing import IO, Protocol

from workers.training.spare_template import FORK_SAFE_ENV, MESSAGE_BYTES

logger = logging.getLogger(__name__)

TEMPLATE_MODULE = "workers.training.spare_template"
# A child whose template ended before reporting it: killed with it (PR_SET_PDEATHSIG, SIGTERM).
_ENDED_WITH_TEMPLATE = -15


class TrainingProcess(Protocol):
    """What the launcher uses of a training process: a Popen, or a spare the template forked."""

    @property
    def pid(self) -> int: ...

    @property
    def stdin(self) -> IO[bytes] | None: ...

    @property
    def returncode(self) -> int | None: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...


class CannotFork(Exception):
    """No spare was forked: the launcher starts one as a new process instead."""


class TemplateGone(CannotFork):
    """The template exited or closed its channel: no spare can be forked from it."""


class ForkRefused(CannotFork):
    """The template did not fork (e.g. a thread it could not leave behind was running): this
    spare is started as a new process, and the template stays for the next."""


class SpareTemplate:
    """The worker's template process: forks spares on request, reports when each ends.

    Thread-safe: the worker's main thread forks spares while a job's thread polls its spare.
    """

    def __init__(self, *, own_session: bool) -> None:
        worker_end, template_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with template_end:
            self._process = subprocess.Popen(
                [sys.executable, "-m", TEMPLATE_MODULE],
                stdin=template_end.fileno(),
                env={**FORK_SAFE_ENV, **os.environ},
                # As a spare is started (launch.WarmProcesses.start_spare): its own process
                # group in the worker's session, or a session of its own.
                start_new_session=own_session,
                process_group=None if own_session else 0,
            )
        self._channel = worker_end
        self._lock = threading.Lock()  # the channel and what was read from it
        self._forking = threading.Lock()  # one fork request at a time
        self._ready = False
        self._gone = False
        self._forked: list[int] = []
        self._refusals: list[str] = []
        self._running: set[int] = set()
        self._exit_codes: dict[int, int] = {}

    @property
    def pid(self) -> int:
        return self._process.pid

    def usable(self) -> bool:
        """Running, or warming up: a fork request will be answered."""
        self._read(0)
        return not self._gone

    def ready(self) -> bool:
        """Warm: a fork request is answered at once."""
        self._read(0)
        return self._ready and not self._gone

    def fork_spare(self) -> ForkedSpare:
        """A new spare, forked once the template is warm (waits for its warm-up).
        Raises TemplateGone when the template is gone, ForkRefused when it did not fork."""
        read_end, write_end = os.pipe()
        with self._forking:
            try:
                with self._lock:
                    if self._gone:
                        raise TemplateGone("the spare template has exited")
                    try:
                        request = json.dumps({"fork": True}).encode()
                        socket.send_fds(self._channel, [request], [read_end])
                    except OSError as error:
                        self._mark_gone()
                        raise TemplateGone(f"the spare template is gone: {error}") from None
            except BaseException:
                os.close(write_end)
                raise
            finally:
                os.close(read_end)
            while True:
                with self._lock:
                    if self._forked:
                        pid = self._forked.pop(0)
                        break
                    if self._refusals:
                        os.close(write_end)
                        raise ForkRefused(self._refusals.pop(0))
                    if self._gone:
                        os.close(write_end)
                        raise TemplateGone("the spare template exited before forking")
                self._read(0.5)
        return ForkedSpare(self, pid, os.fdopen(write_end, "wb"))

    def exit_code(self, pid: int) -> int | None:
        """``pid``'s exit code once it ended, None while it runs."""
        self._read(0)
        with self._lock:
            return self._exit_codes.get(pid)

    def wait_for_news(self, timeout_s: float) -> None:
        """Block up to ``timeout_s`` for the template's next message."""
        self._read(timeout_s)

    def stop(self, grace_s: float = 2.0) -> None:
        """Close the channel: the template exits, and its spares with it."""
        with self._lock:
            self._channel.close()
            self._mark_gone()
        try:
            self._process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()

    def _read(self, timeout_s: float) -> None:
        with self._lock:
            if self._gone:
                return
            if self._process.poll() is not None:
                self._drain()
                self._mark_gone()
                return
            if select.select([self._channel], [], [], timeout_s)[0]:
                self._drain()

    def _drain(self) -> None:
        """Every message waiting on the channel (called with the lock held)."""
        while True:
            try:
                data = self._channel.recv(MESSAGE_BYTES, socket.MSG_DONTWAIT)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                self._mark_gone()
                return
            message = json.loads(data)
            if "exited" in message:
                self._running.discard(message["exited"])
                self._exit_codes[message["exited"]] = message["code"]
            elif "forked" in message:
                self._running.add(message["forked"])
                self._forked.append(message["forked"])
            elif message.get("ready"):
                self._ready = True
            elif "error" in message:
                self._refusals.append(message["error"])

    def _mark_gone(self) -> None:
        if not self._gone:
            self._gone = True
            for pid in self._running:
                self._exit_codes.setdefault(pid, _ENDED_WITH_TEMPLATE)
            self._running.clear()


class ForkedSpare:
    """A spare the template forked: the launcher's ``TrainingProcess``."""

    def __init__(self, template: SpareTemplate, pid: int, stdin: IO[bytes]) -> None:
        self._template = template
        self.pid = pid
        self.stdin: IO[bytes] | None = stdin
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._template.exit_code(self.pid)
            if self.returncode is not None and self.stdin is not None:
                with contextlib.suppress(OSError):
                    self.stdin.close()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(f"forked spare {self.pid}", timeout or 0.0)
            self._template.wait_for_news(0.2 if left is None else min(0.2, left))
        return code
