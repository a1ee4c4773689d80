"""The program that runs reward functions inside the sandbox (started by start.py).

Startup, pipes, limits and the first frame are the child runtime's (runtime.py); this program
serves two requests:

- ``{"op": "load", "functions": [{name, source, entry, form, version, max_concurrency,
  sample_timeout_s, rate_limit_per_s}], "timeout_s"}`` -> ``{"ok": true}`` or
  ``{"ok": false, "errors": {name: traceback}}``; all or nothing.
- ``{"op": "score", "function", "timeout_s", "log_limit", "batch": {prompts, completions,
  examples, step}}`` -> ``{"ok": true, "scores", "errors", "logs", "logs_truncated",
  "duration_s", "cpu_s"}``.

Per-sample functions are scored concurrently when they are slow: ``async def`` functions are
awaited together on one event loop, plain ones run in a bounded thread pool once a sample takes
longer than POOL_AFTER_SAMPLE_S (cheap functions stay on the main thread, where a pool would
only add overhead). Each sample has its own time limit beside the call's.
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import math
import os
import resource
import signal
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

from . import runtime
from .reward_scoring import (
    LoadedFunction,
    SampleOutcomes,
    SampleTimer,
    batch_arguments,
    error_of,
    invalid_return,
    sample_extras,
    to_batch_scores,
)
from .runtime import CallTimeout, format_user_traceback, run_source, to_score

if TYPE_CHECKING:
    from concurrent.futures import Future, ThreadPoolExecutor

# A plain per-sample function moves to the thread pool once one sample takes this long: below
# it the function is CPU-bound or trivial, and threads would only add overhead under the GIL.
POOL_AFTER_SAMPLE_S = 0.002
# ...and only when its samples mostly wait: CPU time below this share of the wall time. A call
# to a remote judge uses ~1-3 %; CPU-bound code gets far more, even on a loaded host.
WAITING_SHARE = 0.1


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
        self.python_log = runtime.BoundedLog()
        self.raw_log = runtime.RawOutputCapture()
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
                errors[name] = format_user_traceback(error)
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
        name = spec["name"]
        filename = f"<reward {name} v{spec.get('version', 1)}>"
        module = run_source(f"rft_reward_{len(sys.modules)}", filename, spec["source"])
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
        call_message = f"the call took longer than {timeout_s:g} s"
        outcomes = SampleOutcomes(len(batch["completions"]), deadline, call_message)
        if loaded.is_async:
            self._await_samples(loaded, batch, outcomes)
        else:
            first = 0
            if not (loaded.slow and loaded.max_concurrency > 1):
                first = self._run_samples_here(loaded, batch, outcomes)
            if first < len(outcomes.scores):
                self._run_samples_in_threads(loaded, batch, first, outcomes)
        return outcomes.scores, outcomes.sorted_errors()

    def _run_samples_here(
        self,
        loaded: LoadedFunction,
        batch: dict[str, Any],
        outcomes: SampleOutcomes,
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
        extra = sample_extras(loaded, batch)
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
        timer = self._sample_timer = SampleTimer(outcomes.deadline, sample_limit, previous_start)
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
                scores[index], problem = to_score(value)
                if problem is not None:
                    errors.append(invalid_return(problem, index))
        except CallTimeout:
            outcomes.finished[:index] = [True] * index
            outcomes.time_out_unfinished()
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
            threading.stack_size(runtime.SAMPLE_THREAD_STACK_BYTES)
            self._pool = ThreadPoolExecutor(self.sample_threads, thread_name_prefix="sample")
        return self._pool

    def _run_samples_in_threads(
        self,
        loaded: LoadedFunction,
        batch: dict[str, Any],
        first: int,
        outcomes: SampleOutcomes,
    ) -> None:
        """Score samples first.. on up to max_concurrency pool threads. A sample over its limit
        loses its score; its thread cannot be interrupted, so it is left behind and the
        process is replaced after this call (see _has_stray_threads)."""
        from concurrent.futures import FIRST_COMPLETED, wait

        prompts, completions, examples = batch["prompts"], batch["completions"], batch["examples"]
        extra = sample_extras(loaded, batch)
        function, limiter = loaded.function, loaded.rate_limiter
        sample_limit, deadline = loaded.sample_timeout_s, outcomes.deadline
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
            self._run_samples_here(loaded, batch, outcomes, waiting[0], may_switch=False)
        outcomes.time_out_unfinished()
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
        self, loaded: LoadedFunction, batch: dict[str, Any], outcomes: SampleOutcomes
    ) -> None:
        import asyncio

        prompts, completions, examples = batch["prompts"], batch["completions"], batch["examples"]
        extra = sample_extras(loaded, batch)
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
            self._run_on_loop(score_all(), outcomes.deadline)
        outcomes.time_out_unfinished()

    def _score_batch(
        self, loaded: LoadedFunction, batch: dict[str, Any], deadline: float, timeout_s: float
    ) -> tuple[list[float | None], list[dict[str, Any]]]:
        count = len(batch["completions"])
        nothing: list[float | None] = [None] * count
        arguments = batch_arguments(batch)
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
            return to_batch_scores(values, count)
        except (CallTimeout, TimeoutError):
            message = f"the call took longer than {timeout_s:g} s"
            return nothing, [
                {"kind": "timeout", "message": message, "traceback": None, "sample_index": None}
            ]
        except BaseException as error:
            return nothing, [error_of("exception", error, None)]

    def _collect_logs(self, limit: int) -> tuple[str, bool]:
        log = self.python_log
        raw, raw_dropped = self.raw_log.take(limit - log.kept)
        dropped = log.dropped + raw_dropped
        text = "".join(log.parts) + raw
        if dropped:
            text += f"\n[output truncated: {dropped} more characters]\n"
        log.reset(0)
        return text, dropped > 0


def main() -> None:
    runtime.serve(RewardRunner)
