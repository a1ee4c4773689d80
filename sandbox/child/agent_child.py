"""The program that runs a job's tools and environments inside the sandbox.

It starts exactly like the reward child, on the same child runtime (runtime.py, beside it inside
the sandbox): protocol pipes moved off fds 0-2, the job's environment from the first frame, hard
rlimits, death with the parent. Only the requests differ. Standard library only.

Requests and replies (length-prefixed JSON frames, framing.py):

- ``{"op": "load", "tools": [{name, source, version}], "environments": [{name, source,
  class_name, version}], "timeout_s"}`` -> ``{"ok": true, "tools": [signature],
  "environments": [description]}`` or ``{"ok": false, "errors": {name: message}}``; all or
  nothing, and a successful load drops every open rollout.
- ``{"op": "open", "environment", "rollouts": [{"id", "row"}], "timeout_s", "log_limit"}``
  -> ``{"ok": true, "outcomes": [{"observation", "error", "duration_s", "logs"}]}``.
- ``{"op": "call", "calls": [{"tool", "arguments", "rollout"}], "timeout_s", "log_limit"}``
  -> ``{"ok": true, "outcomes": [{"result", "error", "duration_s", "logs"}]}``.
- ``{"op": "rewards", "rollouts": [id], "timeout_s", "log_limit"}`` -> outcomes with "reward".
- ``{"op": "close", "rollouts": [id]}`` -> ``{"ok": true}``.

Every reply that ran user code also carries ``cpu_s`` and ``worn_out`` (too many timed-out
threads still running, or: replace this process at the next chance).

Concurrency: the steps of one request (a call, a reset, a get_reward) run at once, up to
``max_concurrent`` in flight: ``async def`` code as tasks of one event loop, plain code on
threads of its own (one per step, so a timed-out step can be interrupted without harming a
pool). Steps on the same rollout run one after another, in the order given. Each step has
its own time limit: an awaiting coroutine is cancelled, a plain function's thread gets a
CallTimeout raised into it, and a coroutine that blocks the loop is interrupted by SIGALRM.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import json
import resource
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from .agent_code_rules import AgentCodeProblem, describe_function, environment_methods
from .agent_steps import (
    Step,
    ThreadedStep,
    ThreadStartError,
    exception_error,
    quiet_thread_exceptions,
    rollout_lost,
    step_error,
)
from .runtime import (
    SAMPLE_THREAD_STACK_BYTES,
    BoundedLog,
    CallTimeout,
    RawOutputCapture,
    format_user_traceback,
    run_source,
    serve,
    short_repr,
    to_score,
)

# How much later than a coroutine's own limit SIGALRM interrupts it, when it blocks the loop
# instead of awaiting (a cancelled coroutine that awaits is stopped by wait_for first).
BLOCKED_LOOP_GRACE_S = 0.1
# How often the watchdog looks again while a step past its limit is not the one running.
WATCHDOG_RECHECK_S = 0.02
# The log of the step the current task or thread runs; writes outside any step are dropped.
STEP_LOG: contextvars.ContextVar[BoundedLog] = contextvars.ContextVar("rft_step_log")


class RoutedLog(BoundedLog):
    """sys.stdout and sys.stderr: each write goes to the log of the step that made it."""

    def write(self, text: str) -> int:  # type: ignore[override]
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        log = STEP_LOG.get(None)
        if log is not None:
            log.write(text)
        return len(text)


class LoadedCallable:
    """A tool, or one method of an environment, ready to be bound and called."""

    def __init__(
        self,
        name: str,
        function: Callable[..., Any],
        drop_first: bool,
        module_name: str,
        owner: str,
    ) -> None:
        self.name = name
        self.function = function
        self.is_async = inspect.iscoroutinefunction(function)
        self.description, self.signature = describe_function(
            name, function, drop_first, module_name, owner=owner
        )


class LoadedEnvironment:
    def __init__(self, name: str, cls: type, module_name: str) -> None:
        self.name = name
        self.cls = cls
        self.methods = {
            attribute: LoadedCallable(
                f"{cls.__name__}.{attribute}", function, drop_first, module_name, name
            )
            for attribute, function, drop_first in environment_methods(cls, name)
        }
        reset = cls.reset  # type: ignore[attr-defined]  # environment_methods checked it
        self.reset_keywords = _named_keywords(reset)
        self.reset_is_async = inspect.iscoroutinefunction(reset)
        self.has_reward = callable(getattr(cls, "get_reward", None))

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "class_name": self.cls.__name__,
            "doc": self.cls.__doc__ or "",
            "methods": [
                {**method.description, "name": attribute}
                for attribute, method in self.methods.items()
            ],
            "has_reward": self.has_reward,
        }


def _named_keywords(function: Callable[..., Any]) -> frozenset[str] | None:
    """The keywords `function` accepts, or None when it takes **kwargs (it gets them all):
    reset(**row) gets only the columns it names, as reward functions do."""
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return None
    return frozenset(
        p.name
        for p in parameters
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    )


class Rollout:
    def __init__(self, environment: LoadedEnvironment, instance: Any) -> None:
        self.environment = environment
        self.instance = instance


def _start_rollout(cls: type, row: dict[str, Any]) -> tuple[Any, Any]:
    instance = cls()
    return instance, instance.reset(**row)


async def _start_rollout_async(cls: type, row: dict[str, Any]) -> tuple[Any, Any]:
    instance = cls()
    return instance, await instance.reset(**row)


class AgentRunner:
    def __init__(self, own_pid_namespace: bool, sample_threads: int) -> None:
        self.max_threads = sample_threads
        self.tools: dict[str, LoadedCallable] = {}
        self.environments: dict[str, LoadedEnvironment] = {}
        self.rollouts: dict[str, Rollout] = {}
        self.abandoned: list[ThreadedStep] = []
        self.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self.loop)
        self.loading = False
        # Deadlines of the coroutine steps running now, by their task: the watchdog interrupts
        # a task only while it is the one running, i.e. while it blocks the loop.
        self.task_deadlines: dict[asyncio.Task[Any], float] = {}
        self.raw_log = RawOutputCapture()
        sys.stdout = sys.stderr = RoutedLog()
        threading.stack_size(SAMPLE_THREAD_STACK_BYTES)
        threading.excepthook = quiet_thread_exceptions
        signal.signal(signal.SIGALRM, self._on_alarm)

    # -- timers ---------------------------------------------------------------------------

    def _on_alarm(self, signum: int, frame: object) -> None:
        if self.loading:
            raise CallTimeout
        task = asyncio.current_task(self.loop)
        deadline = self.task_deadlines.get(task) if task is not None else None
        if task is not None and deadline is not None and time.monotonic() >= deadline:
            del self.task_deadlines[task]
            raise CallTimeout
        self._arm_watchdog()

    def _arm_watchdog(self) -> None:
        if not self.task_deadlines:
            signal.setitimer(signal.ITIMER_REAL, 0)
            return
        wait = min(self.task_deadlines.values()) - time.monotonic()
        signal.setitimer(signal.ITIMER_REAL, max(wait, WATCHDOG_RECHECK_S))

    # -- requests -------------------------------------------------------------------------

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request.get("op")
        if op == "load":
            return self.load(request)
        if op == "close":
            for rollout in request["rollouts"]:
                self.rollouts.pop(rollout, None)
            return {"ok": True}
        if op == "ping":
            return {"ok": True}
        timeout_s = float(request["timeout_s"])
        log_limit = int(request["log_limit"])
        if op == "open":
            steps = self._reset_steps(request["environment"], request["rollouts"])
            finish = self._finish_reset
        elif op == "call":
            steps = [self._call_step(call) for call in request["calls"]]
            finish = self._finish_call
        elif op == "rewards":
            steps = [self._reward_step(rollout) for rollout in request["rollouts"]]
            finish = self._finish_reward
        else:
            return {"ok": False, "sandbox_error": f"unknown op {op!r}"}
        width = max(1, int(request.get("max_concurrent", 64)))
        self._run(steps, timeout_s, log_limit, width)
        # Output written to fd 1/2 (subprocesses, C code) cannot be told apart by step: it
        # belongs to a request of one step, and is dropped from requests of several.
        raw, _ = self.raw_log.take(log_limit if len(steps) == 1 else 0)
        if raw:
            steps[0].logs += raw[: max(log_limit - len(steps[0].logs), 0)]
        outcomes = [finish(step) for step in steps]
        if op == "open":
            for rollout, outcome in zip(request["rollouts"], outcomes, strict=True):
                if outcome["error"] is None:
                    self.rollouts[rollout["id"]] = outcome.pop("rollout")
                else:
                    outcome.pop("rollout", None)
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return {
            "ok": True,
            "outcomes": outcomes,
            "cpu_s": usage.ru_utime + usage.ru_stime,
            "worn_out": self._worn_out(),
        }

    def _worn_out(self) -> bool:
        """Whether so many timed-out threads still run that new steps may find no thread."""
        self.abandoned = [
            step for step in self.abandoned if step.thread is not None and step.thread.is_alive()
        ]
        return len(self.abandoned) >= max(1, self.max_threads // 2)

    def load(self, request: dict[str, Any]) -> dict[str, Any]:
        timeout_s = float(request["timeout_s"])
        tools: dict[str, LoadedCallable] = {}
        environments: dict[str, LoadedEnvironment] = {}
        errors: dict[str, str] = {}
        for kind, specs in (("tool", request["tools"]), ("environment", request["environments"])):
            for spec in specs:
                name = spec["name"]
                log = BoundedLog()  # module-level prints go nowhere
                token = STEP_LOG.set(log)
                self.loading = True
                signal.setitimer(signal.ITIMER_REAL, max(timeout_s, 0.001))
                try:
                    try:
                        if kind == "tool":
                            tools[name] = self._load_tool(spec)
                        else:
                            environments[name] = self._load_environment(spec)
                    finally:
                        signal.setitimer(signal.ITIMER_REAL, 0)
                        self.loading = False
                except CallTimeout:
                    errors[name] = f"loading took longer than {timeout_s:g} s"
                except AgentCodeProblem as problem:
                    errors[name] = problem.message
                except BaseException as error:
                    errors[name] = format_user_traceback(error)
                finally:
                    STEP_LOG.reset(token)
        self.raw_log.take(0)
        if errors:
            return {"ok": False, "errors": errors}
        self.tools, self.environments, self.rollouts = tools, environments, {}
        return {
            "ok": True,
            "tools": [tool.description for tool in tools.values()],
            "environments": [environment.describe() for environment in environments.values()],
        }

    @staticmethod
    def _defined(spec: dict[str, Any], kind: str, attribute: str, what: str) -> tuple[str, Any]:
        """Run the spec's source; its module's name and the object it defines as `attribute`,
        if that is a `what`."""
        filename = f"<{kind} {spec['name']} v{spec.get('version', 1)}>"
        # dont_inherit: this package's `from __future__ import annotations` is not the user's.
        module = run_source(f"rft_{kind}_{len(sys.modules)}", filename, spec["source"], True)
        value = module.__dict__.get(attribute)
        is_what = inspect.isfunction if what == "function" else inspect.isclass
        if not is_what(value):
            raise AgentCodeProblem(
                spec["name"], f"the source defines no {what} named {attribute!r}"
            )
        return module.__name__, value

    def _load_tool(self, spec: dict[str, Any]) -> LoadedCallable:
        module_name, function = self._defined(spec, "tool", spec["name"], "function")
        return LoadedCallable(spec["name"], function, False, module_name, spec["name"])

    def _load_environment(self, spec: dict[str, Any]) -> LoadedEnvironment:
        module_name, cls = self._defined(spec, "environment", spec["class_name"], "class")
        return LoadedEnvironment(spec["name"], cls, module_name)

    # -- steps ----------------------------------------------------------------------------

    def _reset_steps(self, environment: str, rollouts: list[dict[str, Any]]) -> list[Step]:
        loaded = self.environments.get(environment)
        steps = []
        for rollout in rollouts:
            if loaded is None:
                message = f"no environment named {environment!r} is loaded"
                steps.append(Step(rollout["id"], error=step_error("environment_lost", message)))
                continue
            row = rollout["row"]
            if not isinstance(row, dict):
                message = f"a row must be an object, not {type(row).__name__}"
                steps.append(Step(rollout["id"], error=step_error("bad_arguments", message)))
                continue
            if loaded.reset_keywords is not None:
                row = {key: value for key, value in row.items() if key in loaded.reset_keywords}
            start = _start_rollout_async if loaded.reset_is_async else _start_rollout
            arguments = {"cls": loaded.cls, "row": row}
            step = Step(rollout["id"], start, arguments, loaded.reset_is_async)
            step.environment = loaded
            steps.append(step)
        return steps

    def _call_step(self, call: dict[str, Any]) -> Step:
        tool, arguments, rollout_id = (
            str(call.get("tool")),
            call.get("arguments"),
            call.get("rollout"),
        )
        chain: object = rollout_id if rollout_id is not None else object()
        if not isinstance(arguments, dict):
            message = f"arguments must be an object, not {type(arguments).__name__}"
            return Step(chain, error=step_error("bad_arguments", message))
        methods: dict[str, LoadedCallable] = {}
        instance = None
        if rollout_id is not None:
            rollout = self.rollouts.get(rollout_id)
            if rollout is None:
                return Step(chain, error=rollout_lost(rollout_id))
            methods, instance = rollout.environment.methods, rollout.instance
        # A standalone tool called during a rollout runs in that rollout's order.
        loaded = methods.get(tool) or self.tools.get(tool)
        if loaded is None:
            known = ", ".join(sorted(set(self.tools) | set(methods))) or "none"
            message = f"there is no tool named {tool!r}; the tools are {known}"
            return Step(chain, error=step_error("unknown_tool", message))
        try:
            loaded.signature.bind(**arguments)
        except TypeError as error:
            message = f"{tool}: {error}; its signature is {loaded.name}{loaded.signature}"
            return Step(chain, error=step_error("bad_arguments", message))
        target = getattr(instance, tool) if tool in methods else loaded.function
        return Step(chain, target, arguments, loaded.is_async)

    def _reward_step(self, rollout_id: str) -> Step:
        rollout = self.rollouts.get(rollout_id)
        if rollout is None:
            return Step(rollout_id, error=rollout_lost(rollout_id))
        if not rollout.environment.has_reward:
            message = f"environment {rollout.environment.name!r} has no get_reward method"
            return Step(rollout_id, error=step_error("unknown_tool", message))
        get_reward = rollout.instance.get_reward
        return Step(rollout_id, get_reward, {}, inspect.iscoroutinefunction(get_reward))

    def _finish_call(self, step: Step) -> dict[str, Any]:
        result = None
        if step.error is None:
            try:
                json.dumps(step.value, allow_nan=False)
                result = step.value
            except (TypeError, ValueError) as error:
                step.error = step_error(
                    "not_serializable",
                    f"returned {type(step.value).__name__} {short_repr(step.value)}, "
                    f"which JSON cannot carry ({error})",
                )
        return self._outcome(step, result=result)

    def _finish_reset(self, step: Step) -> dict[str, Any]:
        observation: str | None = None
        instance = None
        if step.error is None:
            instance, value = step.value
            if value is None or isinstance(value, str):
                observation = value
            else:
                try:
                    observation = json.dumps(value, allow_nan=False, ensure_ascii=False)
                except (TypeError, ValueError) as error:
                    step.error = step_error(
                        "not_serializable",
                        f"reset returned {type(value).__name__} {short_repr(value)}, "
                        f"which is neither text nor JSON ({error})",
                    )
        outcome = self._outcome(step, observation=observation)
        if step.error is None:
            assert step.environment is not None
            outcome["rollout"] = Rollout(step.environment, instance)
        return outcome

    def _finish_reward(self, step: Step) -> dict[str, Any]:
        reward = None
        if step.error is None:
            reward, problem = to_score(step.value)
            if reward is None:
                step.error = step_error(
                    "invalid_return", f"get_reward {problem or 'returned None, not a number'}"
                )
        return self._outcome(step, reward=reward)

    @staticmethod
    def _outcome(step: Step, **value: Any) -> dict[str, Any]:
        return {
            **value,
            "error": step.error,
            "duration_s": step.duration_s,
            "logs": step.logs,
        }

    # -- running --------------------------------------------------------------------------

    def _run(self, steps: list[Step], timeout_s: float, log_limit: int, width: int) -> None:
        chains: dict[object, list[Step]] = {}
        for step in steps:
            if step.error is None:
                chains.setdefault(step.chain, []).append(step)
        if not chains:
            return

        async def run_all() -> None:
            gate = asyncio.Semaphore(width)
            threads = asyncio.Semaphore(max(1, min(width, self.max_threads)))

            async def run_chain(chain: list[Step]) -> None:
                for step in chain:
                    async with gate:
                        await self._run_step(step, timeout_s, log_limit, threads)

            await asyncio.gather(*(run_chain(chain) for chain in chains.values()))

        try:
            self.loop.run_until_complete(run_all())
        finally:
            self.task_deadlines.clear()
            signal.setitimer(signal.ITIMER_REAL, 0)

    async def _run_step(
        self, step: Step, timeout_s: float, log_limit: int, threads: asyncio.Semaphore
    ) -> None:
        log = BoundedLog()
        log.limit = log_limit
        token = STEP_LOG.set(log)
        started = time.perf_counter()
        try:
            if step.is_async:
                assert step.function is not None
                task = asyncio.ensure_future(step.function(**step.arguments))
                self.task_deadlines[task] = time.monotonic() + timeout_s + BLOCKED_LOOP_GRACE_S
                self._arm_watchdog()
                try:
                    step.value = await asyncio.wait_for(task, timeout_s)
                finally:
                    self.task_deadlines.pop(task, None)
            else:
                async with threads:
                    step.value = await self._in_thread(step, timeout_s)
        except (TimeoutError, CallTimeout):
            step.error = step_error("timeout", f"the call took longer than {timeout_s:g} s")
        except ThreadStartError as error:
            step.error = step_error("sandbox", str(error))
        except BaseException as error:
            step.error = exception_error(error)
        finally:
            STEP_LOG.reset(token)
            step.duration_s = time.perf_counter() - started
        text = "".join(log.parts)
        if log.dropped:
            text += f"\n[output truncated: {log.dropped} more characters]\n"
        step.logs = text

    async def _in_thread(self, step: Step, timeout_s: float) -> Any:
        future: asyncio.Future[Any] = self.loop.create_future()
        threaded = ThreadedStep(step, self.loop, future)
        # The thread inherits this task's context, so its prints reach the step's log.
        context = contextvars.copy_context()
        thread = threading.Thread(target=context.run, args=(threaded.run,), daemon=True)
        threaded.thread = thread
        try:
            thread.start()
        except RuntimeError as error:  # the process or thread limit
            raise ThreadStartError(f"no thread to run the call: {error}") from None
        try:
            return await asyncio.wait_for(asyncio.shield(future), timeout_s)
        except TimeoutError:
            threaded.interrupt()
            self.abandoned.append(threaded)
            raise


def main() -> None:
    serve(AgentRunner)
