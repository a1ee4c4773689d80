"""The spare template: one warm process that forks the worker's spares.

A spare started as a new Python (``workers.training.spare``) pays torch's, transformers' and
TRL's imports for every job: 7-15 s of CPU on a 2-core machine, which its warm-up hides only
when the previous job trains long enough and leaves a core idle. Jobs that follow each other
closely (a sweep, an evaluation after a training, a test suite) each waited for most of it.
The template pays the imports once per worker: ``python -m workers.training.spare_template``
warms up as a spare does (same functions, same lowest-priority thread), then waits on its
channel for fork requests. Each forked child is a spare from its warm part on
(``spare.serve_forked``): torch's first step, the sandbox started ahead, the job on stdin.

Why forking is safe here: the template forks only while it is the one thread of its process (it
checks, and refuses a request otherwise: the worker then starts a spare of its own). A thread
alive at the fork is missing in the child with whatever it held (a lock, an allocator's state):
the warm-up thread has ended before the first fork; libraries that start threads when they load
are told not to (``FORK_SAFE_ENV``: pyarrow's jemalloc background thread, a documented fork
hazard, and OpenBLAS's pool); the template never runs a torch operation (OpenMP's pool starts at
the first; ``_warm_first_step`` runs in each child) and never touches CUDA. On a machine whose
driver lists a GPU the worker does not use the template unless told to (``Settings.spare_fork``):
vLLM's and DeepSpeed's imports probe the accelerator, and a CUDA driver initialised before a fork
is unusable in the child (not verified on a GPU).

The channel is the worker's ``SOCK_SEQPACKET`` socket on fd 0, one JSON message per packet:
- worker -> template: ``{"fork": true}`` with one file descriptor, the read end of the new
  spare's stdin (the worker keeps the write end: the job folder goes there, as to any spare);
- template -> worker: ``{"ready": true}`` once warm; ``{"forked": pid}`` for each request, or
  ``{"error": why}`` when it does not fork (the worker starts a new Python spare instead);
  ``{"exited": pid, "code": code}`` when a child ends (the worker cannot wait for a process
  that is not its own child; the code is Popen's: negative for a signal).
The worker closes its end to stop the template; the children die with it (PR_SET_PDEATHSIG),
as spares die with the worker. The worker side is ``workers.training.forked_spares``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import socket
import sys
import threading
import time

from workers.training.rank_process import LAUNCH_VARIABLES, configure_logging, die_with_parent
from workers.training.spare import (
    SPARE_PRIORITY_ENV,
    serve_forked,
    start_library_threads_here,
    warm_up_in_background,
)
from workers.training.thread_priority import (
    can_lower_threads,
    may_raise_priority,
    raise_lowered_threads,
)

logger = logging.getLogger("workers.training.spare_template")

MESSAGE_BYTES = 4096
# Set for the template (its children inherit them) unless the worker was given other values:
# libraries that would otherwise start threads when they load. jemalloc's background thread
# (pyarrow's allocator; the variable is its prefixed MALLOC_CONF) and OpenBLAS's pool (numpy's
# BLAS; torch does the training's math with its own) would be alive at every fork.
FORK_SAFE_ENV = {"JE_ARROW_MALLOC_CONF": "background_thread:false", "OPENBLAS_NUM_THREADS": "1"}
# How often the template looks for ended children when nothing else wakes it (pidfds do, where
# the kernel has them: Linux 5.3 and later).
_REAP_INTERVAL_S = 1.0


def send(channel: socket.socket, message: dict[str, object], fds: list[int] | None = None) -> None:
    data = json.dumps(message).encode()
    if fds:
        socket.send_fds(channel, [data], fds)
    else:
        channel.send(data)


def _warm_up(channel: socket.socket) -> None:
    """A spare's warm-up, in a thread at the lowest priority; a fork request that comes first
    waits for it, the thread raised to the worker's priority where this process may."""
    lowest = os.environ.get(SPARE_PRIORITY_ENV, "idle") != "normal" and can_lower_threads()
    may_raise = lowest and may_raise_priority()
    if lowest and not may_raise:
        start_library_threads_here()
    done_read, done_write = os.pipe()
    warm_up = threading.Thread(
        target=warm_up_in_background,
        args=(lowest, done_write),
        name="template-warm-up",
        daemon=True,
    )
    warm_up.start()
    ready, _, _ = select.select([channel.fileno(), done_read], [], [])
    if channel.fileno() in ready and warm_up.is_alive() and may_raise:
        raise_lowered_threads(os.getpid())
    warm_up.join()
    _wait_for_thread_exit(warm_up.native_id)
    os.close(done_read)
    os.close(done_write)


def _wait_for_thread_exit(native_id: int | None, timeout_s: float = 5.0) -> None:
    """Until the thread ``native_id`` has left the process: ``join`` returns once its Python
    part is done, a moment before the OS thread exits, and the template forks only alone."""
    deadline = time.monotonic() + timeout_s
    while native_id is not None and os.path.exists(f"/proc/self/task/{native_id}"):
        if time.monotonic() > deadline:
            return  # the fork request then says which thread is still there
        time.sleep(0.001)


class _Children:
    """The template's forked spares, reaped as they end and reported to the worker."""

    def __init__(self) -> None:
        self._pidfds: dict[int, int | None] = {}  # pid -> its pidfd (None: no pidfds here)

    def add(self, pid: int) -> None:
        pidfd = None
        with contextlib.suppress(OSError, AttributeError):
            pidfd = os.pidfd_open(pid)
        self._pidfds[pid] = pidfd

    def pidfds(self) -> list[int]:
        return [fd for fd in self._pidfds.values() if fd is not None]

    def reap(self, channel: socket.socket) -> None:
        for pid in list(self._pidfds):
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done, status = pid, 0
            if done == 0:
                continue
            pidfd = self._pidfds.pop(pid)
            if pidfd is not None:
                os.close(pidfd)
            send(channel, {"exited": pid, "code": os.waitstatus_to_exitcode(status)})


def other_threads() -> list[str]:
    """The names of this process's threads other than the calling one (native ones included:
    /proc lists every thread, ``threading`` only Python's)."""
    own = threading.get_native_id()
    names = []
    for task in os.listdir("/proc/self/task"):
        if int(task) != own:
            with contextlib.suppress(OSError), open(f"/proc/self/task/{task}/comm") as comm:
                names.append(comm.read().strip())
    return names


def _fork_spare(channel: socket.socket, stdin_fd: int, children: _Children) -> int:
    """Fork a spare reading its job on ``stdin_fd``; in the child, never returns."""
    pid = os.fork()
    if pid != 0:
        # Both sides set the child's group (as shells do), so it is set before the worker
        # hears of the pid, whichever runs first.
        with contextlib.suppress(OSError):
            os.setpgid(pid, pid)
        return pid
    code = 1
    try:
        # Its own process group (the worker stops the group), in the worker's session.
        os.setpgid(0, 0)
        die_with_parent()  # with the template, which dies with the worker
        for fd in children.pidfds():
            os.close(fd)
        os.dup2(stdin_fd, 0)  # replaces fd 0, the template's channel
        os.close(stdin_fd)
        channel.detach()
        code = serve_forked()
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    except BaseException:
        logger.exception("the forked spare failed")
    finally:
        logging.shutdown()
        os._exit(code)


def _serve(channel: socket.socket) -> None:
    children = _Children()
    send(channel, {"ready": True})
    while True:
        ready, _, _ = select.select(
            [channel.fileno(), *children.pidfds()], [], [], _REAP_INTERVAL_S
        )
        children.reap(channel)
        if channel.fileno() not in ready:
            continue
        message, fds, _flags, _address = socket.recv_fds(channel, MESSAGE_BYTES, 1)
        if not message:  # the worker closed its end
            return
        if not fds:
            send(channel, {"error": "a fork request carries the spare's stdin"})
            continue
        threads = other_threads()
        if threads:
            os.close(fds[0])
            send(channel, {"error": f"not forking beside other threads: {', '.join(threads)}"})
            continue
        try:
            pid = _fork_spare(channel, fds[0], children)
        finally:
            os.close(fds[0])
        children.add(pid)
        send(channel, {"forked": pid})


def main() -> int:
    die_with_parent()
    configure_logging()
    # Nobody's rank, as a spare is not (spare.main).
    for name in LAUNCH_VARIABLES:
        os.environ.pop(name, None)
    channel = socket.socket(fileno=0)
    _warm_up(channel)
    # The worker gone mid-message: the children follow the template.
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        _serve(channel)
    return 0


if __name__ == "__main__":
    sys.exit(main())
