"""The AgentSandbox of a job: its tools and environment instances in one warm sandboxed child.

The child (sandbox/child/agent_child.py) runs under exactly the isolation and limits of the
reward sandbox, started by the same SandboxWorker (sandbox/worker_process.py). Environment
instances live in that process, so when it dies (a memory blow-up, ``os._exit``) or stops
answering, it is killed and started again with the loaded code: the calls in flight get KILLED
or TIMEOUT outcomes, and the rollouts it held are gone (their later calls say
ENVIRONMENT_LOST). The same happens when half the child's threads are stuck in timed-out calls
that cannot be interrupted (a plain function in ``time.sleep``): new calls would otherwise find
no thread.

Details of the contract as built:

- ``reset(**row)`` gets only the columns it names, unless it takes ``**kwargs`` (dataset rows
  carry the prompt and other columns). A reset that returns something other than text or
  None has it JSON-encoded as the observation; one JSON cannot carry fails the reset.
- A call with a rollout runs the environment's method of that name, or else a standalone tool
  of that name, in the rollout's order. ``open_rollouts`` of an environment that is not
  loaded gives ENVIRONMENT_LOST outcomes; ``rewards`` of an environment without
  ``get_reward`` gives UNKNOWN_TOOL.
- Results must be strict JSON (``json.dumps(allow_nan=False)``): NaN is NOT_SERIALIZABLE.
- ``*args`` and ``**kwargs`` are not shown to the model (``**kwargs`` still accepts extra
  arguments); a positional-only parameter is an AgentCodeError, as the model names arguments.
- Loading runs each source under ``settings.effective_load_timeout_s``; calls, resets and
  ``get_reward`` under ``limits.tool_timeout_s`` each.
- What user code prints through Python lands in its own call's logs; what subprocesses write
  to fd 1/2 only when the request had a single call.
"""

from __future__ import annotations

import logging
import math
import secrets
import threading
import weakref
from collections import Counter
from collections.abc import Sequence
from typing import Any

from sandbox.agent_api import (
    AgentCodeError,
    AgentLimits,
    AgentSandbox,
    EnvironmentDescription,
    EnvironmentSpec,
    LoadedAgentCode,
    ResetOutcome,
    RewardOutcome,
    ToolCall,
    ToolError,
    ToolErrorKind,
    ToolOutcome,
    ToolParameter,
    ToolSignature,
    ToolSpec,
)
from sandbox.child.framing import encode_frame
from sandbox.child.runtime import MAX_SAMPLE_THREADS
from sandbox.isolation import AGENT_CHILD, SandboxUnavailableError
from sandbox.redaction import SecretMask
from sandbox.settings import SandboxSettings
from sandbox.worker_process import (
    SandboxWorker,
    WorkerFailure,
    WorkerHost,
    check_isolation,
)

logger = logging.getLogger(__name__)

# Beyond its own limits, how long the parent waits for a reply before it kills the child: the
# child times each step out itself, so this covers only a child that hangs or crawls.
REPLY_MARGIN_S = 2.0
# A child past this share of its CPU-time limit is replaced even while rollouts are open: the
# limit would otherwise kill it in the middle of a call.
CPU_REPLACE_FRACTION = 0.95


class ProcessAgentSandbox(WorkerHost, AgentSandbox):
    """AgentSandbox on one warm child process. Thread-safe: requests take turns."""

    def __init__(self, settings: SandboxSettings, limits: AgentLimits | None = None) -> None:
        self.settings = settings
        self.limits = limits or AgentLimits()
        if self.limits.tool_timeout_s <= 0 or self.limits.max_concurrent_calls < 1:
            raise ValueError("tool_timeout_s and max_concurrent_calls must be positive")
        check_isolation(settings, "tool and environment code")
        self._worker = SandboxWorker(settings, "agent-sandbox", AGENT_CHILD)
        self._mask = SecretMask(settings.env)
        self._lock = threading.Lock()
        self._load_frame: bytes | None = None
        self._loaded = LoadedAgentCode(tools=(), environments={})
        self._open: set[str] = set()  # rollouts the current child holds
        # Ids are never reused, not even by a restarted child: a stale id is always "lost".
        self._id_prefix = secrets.token_hex(4)
        self._next_id = 0
        self._closed = False
        self._finalizer = weakref.finalize(self, self._worker.shut_down)
        self._start_or_close([self._worker])

    @property
    def loaded(self) -> LoadedAgentCode:
        return self._loaded

    # -- the protocol ---------------------------------------------------------------------

    def load(
        self, tools: Sequence[ToolSpec], environments: Sequence[EnvironmentSpec]
    ) -> LoadedAgentCode:
        for kind, names in (
            ("tools", [tool.name for tool in tools]),
            ("environments", [environment.name for environment in environments]),
        ):
            duplicates = sorted(name for name, count in Counter(names).items() if count > 1)
            if duplicates:
                raise AgentCodeError(duplicates[0], f"two {kind} share this name")
        frame = encode_frame(
            {
                "op": "load",
                "timeout_s": self.settings.effective_load_timeout_s,
                "tools": [
                    {"name": tool.name, "source": tool.source, "version": tool.version}
                    for tool in tools
                ],
                "environments": [
                    {
                        "name": environment.name,
                        "source": environment.source,
                        "class_name": environment.class_name,
                        "version": environment.version,
                    }
                    for environment in environments
                ],
            }
        )
        every_name = ", ".join([tool.name for tool in tools] + [e.name for e in environments])
        hard_timeout_s = self.settings.effective_load_timeout_s * max(
            1, len(tools) + len(environments)
        )
        with self._lock:
            self._check_open()
            if not self._worker.alive:
                self._restart()
            try:
                reply = self._worker.request(frame, hard_timeout_s + REPLY_MARGIN_S)
            except WorkerFailure as failure:
                self._restart()  # with the previous code
                raise AgentCodeError(
                    every_name or "code", self._mask.text(f"loading failed: {failure.message}")
                ) from None
            if reply.get("ok") is not True:
                errors = reply.get("errors")
                if isinstance(errors, dict) and errors:
                    name, detail = next(iter(errors.items()))
                    raise AgentCodeError(str(name), self._mask.text(f"loading failed:\n{detail}"))
                raise AgentCodeError(
                    every_name or "code",
                    self._mask.text(f"loading failed: {reply.get('sandbox_error')}"),
                )
            try:
                loaded = _parse_loaded(reply, environments)
            except (KeyError, TypeError, ValueError) as error:
                self._restart()
                raise AgentCodeError(
                    every_name or "code", f"the sandbox described the code wrongly: {error}"
                ) from None
            self._load_frame = frame
            self._worker.loaded_body = frame
            self._loaded = loaded
            self._open.clear()  # the child dropped every rollout
            return loaded

    def open_rollouts(self, environment: str, rows: Sequence[dict[str, Any]]) -> list[ResetOutcome]:
        if not rows:
            return []
        with self._lock:
            self._check_open()
            ids = [self._new_id() for _ in rows]
            request = self._step_request("open")
            request |= {
                "environment": environment,
                "rollouts": [
                    {"id": rollout, "row": row} for rollout, row in zip(ids, rows, strict=True)
                ],
            }
            replies, failure = self._exchange(request, len(rows), 1)
            outcomes = []
            for rollout, raw in zip(ids, replies, strict=True):
                error = failure or _parse_error(raw.get("error"), self._mask)
                observation = raw.get("observation")
                if error is None:
                    self._open.add(rollout)
                outcomes.append(
                    ResetOutcome(
                        rollout=rollout,
                        observation=observation
                        if isinstance(observation, str) and error is None
                        else None,
                        error=error,
                        duration_s=_duration(raw),
                    )
                )
            return outcomes

    def call(self, calls: Sequence[ToolCall]) -> list[ToolOutcome]:
        if not calls:
            return []
        per_rollout = Counter(call.rollout for call in calls if call.rollout is not None)
        longest_chain = max(per_rollout.values(), default=1)
        with self._lock:
            self._check_open()
            request = self._step_request("call")
            request["calls"] = [
                {"tool": call.tool, "arguments": call.arguments, "rollout": call.rollout}
                for call in calls
            ]
            replies, failure = self._exchange(request, len(calls), longest_chain)
            return [
                ToolOutcome(
                    result=raw.get("result") if failure is None else None,
                    error=failure or _parse_error(raw.get("error"), self._mask),
                    duration_s=_duration(raw),
                    logs=self._mask.text(raw.get("logs") or "")
                    if isinstance(raw.get("logs"), str)
                    else "",
                )
                for raw in replies
            ]

    def rewards(self, rollouts: Sequence[str]) -> list[RewardOutcome]:
        if not rollouts:
            return []
        longest_chain = max(Counter(rollouts).values())
        with self._lock:
            self._check_open()
            request = self._step_request("rewards")
            request["rollouts"] = list(rollouts)
            replies, failure = self._exchange(request, len(rollouts), longest_chain)
            outcomes = []
            for raw in replies:
                error = failure or _parse_error(raw.get("error"), self._mask)
                reward = raw.get("reward")
                valid = (
                    isinstance(reward, int | float)
                    and not isinstance(reward, bool)
                    and math.isfinite(reward)
                )
                if error is None and not valid:
                    error = ToolError(ToolErrorKind.SANDBOX, f"the sandbox sent reward {reward!r}")
                outcomes.append(
                    RewardOutcome(
                        reward=float(reward) if error is None and reward is not None else None,
                        error=error,
                        duration_s=_duration(raw),
                    )
                )
            return outcomes

    def close_rollouts(self, rollouts: Sequence[str]) -> None:
        with self._lock:
            if self._closed:
                return
            ids = [rollout for rollout in rollouts if rollout in self._open]
            self._open.difference_update(ids)
            if not ids or not self._worker.alive:
                return
            try:
                self._worker.request(encode_frame({"op": "close", "rollouts": ids}), REPLY_MARGIN_S)
            except WorkerFailure:
                self._restart()

    def close(self) -> None:
        self._closed = True
        self._worker.shut_down()
        self._finalizer.detach()

    # -- helpers --------------------------------------------------------------------------

    def _new_id(self) -> str:
        self._next_id += 1
        return f"{self._id_prefix}-{self._next_id}"

    def _step_request(self, op: str) -> dict[str, Any]:
        return {
            "op": op,
            "timeout_s": self.limits.tool_timeout_s,
            "log_limit": self.limits.log_limit,
            "max_concurrent": self.limits.max_concurrent_calls,
        }

    def _reply_deadline_s(self, count: int, longest_chain: int) -> float:
        """How long a request of `count` steps may take: its longest run of steps on one
        rollout, or its waves of steps when there are more than can run at once."""
        width = min(self.limits.max_concurrent_calls, self._child_threads())
        waves = max(longest_chain, math.ceil(count / width))
        return waves * self.limits.tool_timeout_s + self.settings.kill_grace_s + REPLY_MARGIN_S

    def _child_threads(self) -> int:
        # The child's own bound on threads for plain functions (half its process limit).
        threads = MAX_SAMPLE_THREADS
        if self.settings.isolation == "bwrap":
            threads = max(1, min(threads, self.settings.max_processes // 2))
        return threads

    def _exchange(
        self, request: dict[str, Any], count: int, longest_chain: int
    ) -> tuple[list[dict[str, Any]], ToolError | None]:
        """Send a request of `count` steps; the child's outcomes, or empty ones and the error
        every step gets when the child failed (it is then restarted)."""
        nothing: list[dict[str, Any]] = [{} for _ in range(count)]
        if not self._worker.alive or self._worker.loaded_body != self._load_frame:
            problem = self._restart()
            if problem is not None:
                return nothing, ToolError(ToolErrorKind.SANDBOX, problem)
        try:
            reply = self._worker.request(
                encode_frame(request), self._reply_deadline_s(count, longest_chain)
            )
        except WorkerFailure as failure:
            self._restart()
            kind = ToolErrorKind(failure.kind.value)
            return nothing, ToolError(kind, self._mask.text(failure.message))
        outcomes = reply.get("outcomes")
        if (
            reply.get("ok") is not True
            or not isinstance(outcomes, list)
            or len(outcomes) != count
            or not all(isinstance(outcome, dict) for outcome in outcomes)
        ):
            self._restart()
            detail = str(reply.get("sandbox_error") or "outcomes missing")[:2000]
            message = f"the sandbox process sent a bad reply: {detail}"
            return nothing, ToolError(ToolErrorKind.SANDBOX, self._mask.text(message))
        cpu_share = self._worker.cpu_share(reply)
        if (
            reply.get("worn_out") is True
            or cpu_share > CPU_REPLACE_FRACTION
            or (self._worker.worn_out(reply) and not self._open)
        ):
            # Replaced now, between requests, rather than killed by a limit in the middle of one.
            logger.warning("replacing the agent sandbox process (worn out); open rollouts end")
            self._restart()
        return outcomes, None

    def _restart(self) -> str | None:
        """Replace the child and load the current code; say what went wrong, if anything.
        Every rollout of the old child is gone."""
        self._open.clear()
        if self._closed:
            return "the sandbox is closed"
        try:
            self._worker.start()
        except SandboxUnavailableError as error:
            logger.error("the agent sandbox could not restart: %s", error)
            return f"the sandbox could not restart: {self._mask.text(str(error))}"
        if self._load_frame is None:
            return None
        try:
            reply = self._worker.request(
                self._load_frame, self.settings.effective_load_timeout_s + REPLY_MARGIN_S
            )
        except WorkerFailure as failure:
            return self._mask.text(f"reloading the code after a restart failed: {failure.message}")
        if reply.get("ok") is not True:
            return self._mask.text(f"reloading the code after a restart failed: {reply}")
        self._worker.loaded_body = self._load_frame
        return None

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this agent sandbox is closed")


def create_agent_sandbox(
    settings: SandboxSettings, limits: AgentLimits | None = None
) -> ProcessAgentSandbox:
    """The agent sandbox for `settings`; raises SandboxUnavailableError when bwrap cannot be
    used."""
    return ProcessAgentSandbox(settings, limits)


def _duration(raw: dict[str, Any]) -> float:
    duration = raw.get("duration_s")
    return float(duration) if isinstance(duration, int | float) else 0.0


def _parse_error(raw: object, mask: SecretMask) -> ToolError | None:
    """The child's error, trusting nothing in it: user code ran there."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        return ToolError(ToolErrorKind.SANDBOX, "the sandbox sent a malformed error")
    try:
        kind = ToolErrorKind(str(raw.get("kind")))
    except ValueError:
        kind = ToolErrorKind.SANDBOX
    trace = raw.get("traceback")
    return ToolError(
        kind=kind,
        message=mask.text(str(raw.get("message", ""))),
        traceback=mask.text(trace) if isinstance(trace, str) else None,
    )


def _parse_signature(raw: dict[str, Any]) -> ToolSignature:
    def text_or_none(value: object) -> str | None:
        if value is not None and not isinstance(value, str):
            raise TypeError(f"annotation {value!r} is not text")
        return value

    parameters = tuple(
        ToolParameter(
            name=str(parameter["name"]),
            annotation=text_or_none(parameter["annotation"]),
            has_default=parameter["has_default"] is True,
            default=parameter["default"],
        )
        for parameter in raw["parameters"]
    )
    return ToolSignature(
        name=str(raw["name"]),
        doc=str(raw["doc"]),
        parameters=parameters,
        returns=text_or_none(raw["returns"]),
        is_async=raw["is_async"] is True,
    )


def _parse_loaded(reply: dict[str, Any], specs: Sequence[EnvironmentSpec]) -> LoadedAgentCode:
    environments = {}
    for raw in reply["environments"]:
        name = str(raw["name"])
        environments[name] = EnvironmentDescription(
            name=name,
            class_name=str(raw["class_name"]),
            doc=str(raw["doc"]),
            methods=tuple(_parse_signature(method) for method in raw["methods"]),
            has_reward=raw["has_reward"] is True,
        )
    if set(environments) != {spec.name for spec in specs}:
        raise ValueError("the environments described are not those loaded")
    return LoadedAgentCode(
        tools=tuple(_parse_signature(tool) for tool in reply["tools"]),
        environments=environments,
    )
