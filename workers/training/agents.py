"""Tools and environments for TRL's tool-calling loop, with the user's code in the sandbox.

TRL 1.16 runs the loop itself (``GRPOTrainer(tools=..., environment_factory=...)``): it renders
each tool's schema into the prompt from the callable's name, signature and docstring, parses
the model's tool calls, calls the callables, and masks tool output out of the loss. The user's
code must never run in the trainer, so TRL is handed stand-ins: functions (and an environment
class) with the user's names, signatures and docstrings whose bodies forward the call to the
job's AgentSandbox, the way trl's ``experimental/openreward`` adapter binds tool methods to a
remote session.

Two things TRL does not do, done here:
- **Calls of different rollouts overlap.** TRL calls the tools of one rollout after another.
  When the first call of a round arrives, :class:`AgentSession` reads every call of that round
  from the batch's completions (the same list TRL walks), sends them to the sandbox in one
  batch (run concurrently there), and answers TRL's calls, in TRL's order, from the results.
- **Every call is recorded**: arguments, result, typed error, duration; a rollout's whole
  trajectory is built from TRL's messages and these records after the loop.
"""

from __future__ import annotations

import collections
import inspect
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sandbox.agent_api import (
    AgentCodeError,
    AgentSandbox,
    EnvironmentDescription,
    EnvironmentSpec,
    LoadedAgentCode,
    ToolCall,
    ToolError,
    ToolErrorKind,
    ToolOutcome,
    ToolSignature,
    ToolSpec,
)
from sandbox.api import FunctionResult, RewardError, RewardErrorKind
from sandbox.child.agent_code_rules import AgentCodeProblem, annotation_type, check_loaded_code

logger = logging.getLogger(__name__)

# Text of a tool message whose call failed, as TRL itself words failures ({"error": str(e)}).
ERROR_KEY = "error"


class ToolCallFailed(Exception):
    """Raised by a stand-in for a call that failed: TRL turns it into the tool message
    ``{"error": message}`` for the model, counts it as a failure and goes on."""


def _python_signature(tool: ToolSignature, *, method: bool, where: str) -> inspect.Signature:
    parameters = (
        [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)] if method else []
    )
    for parameter in tool.parameters:
        parameters.append(
            inspect.Parameter(
                parameter.name,
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
                default=parameter.default if parameter.has_default else inspect.Parameter.empty,
                annotation=annotation_type(
                    parameter.annotation, owner=where, where=f"{where}({parameter.name})"
                ),
            )
        )
    returns: Any = inspect.Signature.empty
    if tool.returns is not None:
        # Shown to the model too (the schema's "return"); one it cannot show is left out, as
        # transformers leaves out a return hint it cannot convert.
        try:
            returns = annotation_type(tool.returns, owner=where, where=f"{where} return")
        except AgentCodeProblem:
            returns = inspect.Signature.empty
    return inspect.Signature(parameters, return_annotation=returns)


def _standin(
    tool: ToolSignature,
    forward: Callable[[Any, dict[str, Any]], Any],
    *,
    method: bool,
    where: str,
) -> Callable[..., Any]:
    """A function TRL sees as the user's tool: same name, signature, hints and docstring; its
    body forwards the call. The arguments are bound here, so arguments the model got wrong
    are a recorded BAD_ARGUMENTS error rather than a TypeError raised before any code runs."""
    signature = _python_signature(tool, method=method, where=where)
    call_signature = signature.replace(parameters=list(signature.parameters.values())[method:])

    def standin(*args: Any, **kwargs: Any) -> Any:
        owner = args[0] if method else None
        positional = args[1:] if method else args
        return forward(owner, _bind(call_signature, tool.name, positional, kwargs))

    standin.__name__ = standin.__qualname__ = tool.name
    standin.__doc__ = tool.doc
    standin.__signature__ = signature  # type: ignore[attr-defined]
    standin.__annotations__ = {
        name: parameter.annotation
        for name, parameter in signature.parameters.items()
        if parameter.annotation is not inspect.Parameter.empty
    }
    if signature.return_annotation is not inspect.Signature.empty:
        standin.__annotations__["return"] = signature.return_annotation
    try:
        from transformers.utils import get_json_schema

        # What TRL does with it when it renders the prompt. check_loaded_code holds the same
        # rules (so the API refuses what would fail here); this is the guard should the
        # installed transformers read tools more strictly than they do.
        get_json_schema(standin)
    except Exception as error:
        raise AgentCodeError(where, f"cannot describe this tool to the model: {error}") from None
    return standin


class _BadArguments(dict[str, Any]):
    """Arguments that did not bind: their reason travels with them to the session."""

    reason = ""


def _bind(
    signature: inspect.Signature, name: str, args: Sequence[Any], kwargs: dict[str, Any]
) -> dict[str, Any]:
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError as error:
        bad = _BadArguments(kwargs)
        bad.reason = f"{name}: {error}"
        return bad
    return dict(bound.arguments)


class EnvironmentStandin:
    """Base of the generated stand-in classes: one instance per rollout slot (TRL pools them
    and calls ``reset`` for each new rollout). Only underscored names here: TRL takes every
    public function of the class for a tool."""

    _session: AgentSession
    _environment: str

    def __init__(self) -> None:
        self._rollout: str | None = None

    def _reset(self, **row: Any) -> str | None:
        session = self._session
        if self._rollout is not None:
            session.close_rollout(self._rollout)
        self._rollout, observation = session.open_rollout(self._environment, row)
        return observation


@dataclass
class CallRecord:
    """One tool call of a rollout, as the trajectory shows it."""

    tool: str
    arguments: Any
    outcome: ToolOutcome


@dataclass
class _PlannedCall:
    rollout_index: int
    call: ToolCall
    outcome: ToolOutcome | None = None


@dataclass
class AgentBatch:
    """The current generation batch's tool calls, planned and recorded."""

    rollouts: int
    completions: list[list[dict[str, Any]]]
    tool_dicts: list[dict[str, Callable[..., Any]]]
    planned: collections.deque[_PlannedCall] = field(default_factory=collections.deque)
    executed_messages: set[int] = field(default_factory=set)
    records: list[list[CallRecord]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.records = [[] for _ in range(self.rollouts)]


class AgentSession:
    """A job's tools and environments on one rank: the stand-ins TRL holds, the calls they
    make, and what each rollout did."""

    def __init__(
        self, sandbox: AgentSandbox, rows: Sequence[dict[str, Any]], index_column: str
    ) -> None:
        self.sandbox = sandbox
        # The rows TRL's index column points into (the training set; the validation set while
        # an evaluation runs: RewardDispatcher.scoring_rows).
        self.rows = rows
        self._index_column = index_column
        self.code: LoadedAgentCode | None = None
        self.tools: list[Callable[..., Any]] = []
        self.environment_classes: dict[str, type[EnvironmentStandin]] = {}
        self.environment_specs: dict[str, EnvironmentSpec] = {}
        self.tool_specs: list[ToolSpec] = []
        self._batch: AgentBatch | None = None
        # The finished batch's trajectories, in TRL's sample order (the reward's order).
        self.last_trajectories: list[list[dict[str, Any]]] | None = None

    # Loading code ---------------------------------------------------------------------------

    def load(self, tools: Sequence[ToolSpec], environments: Sequence[EnvironmentSpec]) -> None:
        """Load this code in the sandbox and build its stand-ins; AgentCodeError (and the
        previous code stays in force) if any of it cannot be used."""
        code = self.sandbox.load(tools, environments)
        try:
            # The rules the API checked this code by at creation (sandbox.child.agent_code_rules).
            check_loaded_code(code)
        except AgentCodeProblem as problem:
            raise AgentCodeError(problem.name, problem.message) from None
        standalone = [
            _standin(
                signature, self._tool_forwarder(signature.name), method=False, where=signature.name
            )
            for signature in code.tools
        ]
        classes = {
            name: self._environment_class(description)
            for name, description in code.environments.items()
        }
        self.code = code
        self.tools = standalone
        self.environment_classes = classes
        self.tool_specs = list(tools)
        self.environment_specs = {spec.name: spec for spec in environments}

    def _environment_class(self, description: EnvironmentDescription) -> type[EnvironmentStandin]:
        members: dict[str, Any] = {
            "__doc__": description.doc,
            "_session": self,
            "_environment": description.name,
            "reset": lambda instance, **row: instance._reset(**row),
        }
        for method in description.methods:
            members[method.name] = _standin(
                method,
                self._method_forwarder(method.name),
                method=True,
                where=f"{description.name}.{method.name}",
            )
        return type(description.class_name, (EnvironmentStandin,), members)

    def _tool_forwarder(self, name: str) -> Callable[[Any, dict[str, Any]], Any]:
        return lambda owner, arguments: self.call(name, arguments, None)

    def _method_forwarder(self, name: str) -> Callable[[Any, dict[str, Any]], Any]:
        return lambda owner, arguments: self.call(name, arguments, owner._rollout)

    @property
    def environment_factory(
        self,
    ) -> type[EnvironmentStandin] | dict[str, type[EnvironmentStandin]] | None:
        """What TRL's ``environment_factory`` takes: one class, or a dict by name (rows then
        pick theirs with an ``environment`` column)."""
        if not self.environment_classes:
            return None
        if len(self.environment_classes) == 1:
            return next(iter(self.environment_classes.values()))
        return dict(self.environment_classes)

    @property
    def rewarded_environments(self) -> list[EnvironmentSpec]:
        """Environments whose ``get_reward`` scores rollouts, beside the reward functions."""
        if self.code is None:
            return []
        return [
            self.environment_specs[name]
            for name, description in self.code.environments.items()
            if description.has_reward
        ]

    # Rollouts -------------------------------------------------------------------------------

    def open_rollout(self, environment: str, trl_row: Mapping[str, Any]) -> tuple[str, str | None]:
        """A new instance for one rollout, reset with its dataset row as uploaded (TRL passes
        only the prompt and our index column)."""
        index = trl_row.get(self._index_column)
        row = dict(self.rows[int(index)]) if index is not None else dict(trl_row)
        row.pop("environment", None)  # TRL's control column, not a reset argument
        (outcome,) = self.sandbox.open_rollouts(environment, [row])
        if outcome.error is not None:
            logger.info("reset of %s failed: %s", environment, outcome.error.message)
        return outcome.rollout, outcome.observation

    def close_rollout(self, rollout: str) -> None:
        self.sandbox.close_rollouts([rollout])

    def environment_rewards(
        self, environments: Sequence[Any] | None, count: int
    ) -> dict[str, FunctionResult]:
        """``get_reward()`` of each rollout's instance, per rewarded environment: scores of the
        rollouts of other environments are None (they are not that environment's to score)."""
        results: dict[str, FunctionResult] = {}
        rewarded = self.rewarded_environments
        if not rewarded:
            return results
        instances = list(environments or [])
        for spec in rewarded:
            indices = [
                i
                for i, instance in enumerate(instances)
                if isinstance(instance, EnvironmentStandin)
                and instance._environment == spec.name
                and instance._rollout is not None
            ]
            outcomes = self.sandbox.rewards([instances[i]._rollout for i in indices])
            scores: list[float | None] = [None] * count
            errors: list[RewardError] = []
            for i, outcome in zip(indices, outcomes, strict=True):
                scores[i] = outcome.reward
                if outcome.error is not None:
                    errors.append(
                        RewardError(
                            kind=_reward_error_kind(outcome.error.kind),
                            message=outcome.error.message,
                            traceback=outcome.error.traceback,
                            sample_index=i,
                        )
                    )
            results[spec.name] = FunctionResult(
                name=spec.name,
                version=spec.version,
                scores=scores,
                errors=errors,
                duration_s=max((o.duration_s for o in outcomes), default=0.0),
            )
        return results

    # The tool-calling loop ------------------------------------------------------------------

    def begin_tool_loop(
        self,
        completions: list[list[dict[str, Any]]],
        tool_dicts: list[dict[str, Callable[..., Any]]],
    ) -> None:
        """TRL is about to run its tool loop over ``completions`` (it appends to these very
        lists as it goes; ``tool_dicts[i]`` are the callables of rollout i)."""
        self._batch = AgentBatch(len(completions), completions, tool_dicts)

    def end_generation(
        self,
        completions: list[list[dict[str, Any]]],
        completion_ids: Sequence[Sequence[int]],
        tool_mask: Sequence[Sequence[int]] | None,
        max_completion_length: int,
    ) -> None:
        """The batch is generated (tool rounds included): keep each rollout's trajectory."""
        batch = self._batch
        self._batch = None
        records = batch.records if batch is not None else [[] for _ in completions]
        self.last_trajectories = [
            build_trajectory(
                messages,
                records[i],
                truncated=len(completion_ids[i]) >= max_completion_length,
                masked_tokens=(len(tool_mask[i]) - sum(tool_mask[i])) if tool_mask else 0,
                known_tools=set(batch.tool_dicts[i]) if batch is not None else set(),
            )
            for i, messages in enumerate(completions)
        ]

    def call(self, tool: str, arguments: dict[str, Any], rollout: str | None) -> Any:
        """A stand-in's call: answered from the round's batch when it was planned there."""
        batch = self._batch
        if isinstance(arguments, _BadArguments):
            outcome = ToolOutcome(None, ToolError(ToolErrorKind.BAD_ARGUMENTS, arguments.reason))
            self._consume(batch, tool, dict(arguments), rollout, outcome)
            raise ToolCallFailed(outcome.error.message if outcome.error else "")
        if batch is not None and not batch.planned:
            self._plan_round(batch)
        planned = self._take(batch, tool, arguments, rollout)
        if planned is not None and planned.outcome is not None:
            outcome = planned.outcome
            batch.records[planned.rollout_index].append(CallRecord(tool, arguments, outcome))  # type: ignore[union-attr]
        else:
            # Not foreseen (a call outside TRL's loop, or an order we did not predict): run it
            # on its own. Correct, only not overlapped with the others.
            (outcome,) = self.sandbox.call([ToolCall(tool, arguments, rollout)])
        return _result_for_model(outcome)

    def _consume(
        self,
        batch: AgentBatch | None,
        tool: str,
        arguments: dict[str, Any],
        rollout: str | None,
        outcome: ToolOutcome,
    ) -> None:
        if batch is None:
            return
        if not batch.planned:
            self._plan_round(batch)
        planned = self._take(batch, tool, None, rollout)
        if planned is not None:
            batch.records[planned.rollout_index].append(CallRecord(tool, arguments, outcome))

    @staticmethod
    def _take(
        batch: AgentBatch | None, tool: str, arguments: dict[str, Any] | None, rollout: str | None
    ) -> _PlannedCall | None:
        if batch is None or not batch.planned:
            return None
        head = batch.planned[0]
        if head.call.tool != tool or head.call.rollout != rollout:
            logger.warning("tool call %s not in the planned order; running it alone", tool)
            batch.planned.clear()
            return None
        if arguments is not None and head.call.arguments != arguments:
            logger.warning("tool call %s has other arguments than planned; running it alone", tool)
            batch.planned.clear()
            return None
        return batch.planned.popleft()

    def _plan_round(self, batch: AgentBatch) -> None:
        """Every call TRL will make in this round, in its order (rollouts in index order, each
        rollout's calls in order), run at once in the sandbox."""
        planned: list[_PlannedCall] = []
        for index, messages in enumerate(batch.completions):
            if not messages:
                continue
            last = messages[-1]
            if last.get("role") != "assistant" or not last.get("tool_calls"):
                continue
            if id(last) in batch.executed_messages:
                continue  # its results were rolled back (too long): TRL leaves it there
            batch.executed_messages.add(id(last))
            tools = batch.tool_dicts[index]
            for tool_call in last["tool_calls"]:
                if tool_call.get("type") != "function":
                    continue
                function = tool_call.get("function") or {}
                name = function.get("name")
                arguments = function.get("arguments")
                if name not in tools or not isinstance(arguments, Mapping):
                    continue  # TRL answers these itself (tool not found, arguments not an object)
                target = tools[name]
                owner = getattr(target, "__self__", None)
                rollout = owner._rollout if isinstance(owner, EnvironmentStandin) else None
                item = _PlannedCall(index, ToolCall(name, dict(arguments), rollout))
                try:
                    signature = inspect.signature(target)
                    bound = signature.bind(**arguments)
                    item.call = ToolCall(name, dict(bound.arguments), rollout)
                except TypeError as error:
                    item.outcome = ToolOutcome(
                        None, ToolError(ToolErrorKind.BAD_ARGUMENTS, f"{name}: {error}")
                    )
                planned.append(item)
        to_run = [item for item in planned if item.outcome is None]
        if to_run:
            outcomes = self.sandbox.call([item.call for item in to_run])
            for item, outcome in zip(to_run, outcomes, strict=True):
                item.outcome = outcome
        batch.planned.extend(planned)

    def close(self) -> None:
        self.sandbox.close()


def _result_for_model(outcome: ToolOutcome) -> Any:
    if outcome.error is not None:
        raise ToolCallFailed(f"{outcome.error.kind.value}: {outcome.error.message}")
    result = outcome.result
    # TRL passes a list through as content blocks (images, text parts) and str()s anything else:
    # a JSON text is what models are trained to read for structured results.
    if isinstance(result, list | dict):
        return json.dumps(result, ensure_ascii=False)
    return result


def _result_for_record(outcome: ToolOutcome) -> str:
    result = outcome.result
    return result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)


def _reward_error_kind(kind: ToolErrorKind) -> RewardErrorKind:
    return {
        ToolErrorKind.TIMEOUT: RewardErrorKind.TIMEOUT,
        ToolErrorKind.KILLED: RewardErrorKind.KILLED,
        ToolErrorKind.INVALID_RETURN: RewardErrorKind.INVALID_RETURN,
        ToolErrorKind.SANDBOX: RewardErrorKind.SANDBOX,
        ToolErrorKind.ENVIRONMENT_LOST: RewardErrorKind.SANDBOX,
    }.get(kind, RewardErrorKind.EXCEPTION)


def build_trajectory(
    messages: Sequence[dict[str, Any]],
    records: Sequence[CallRecord],
    *,
    truncated: bool,
    masked_tokens: int,
    known_tools: set[str],
) -> list[dict[str, Any]]:
    """A rollout turn by turn: TRL's messages, each tool result with its call's record."""
    pending = collections.deque(records)
    trajectory: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        if role == "assistant":
            turn: dict[str, Any] = {"role": "assistant", "content": _text(message.get("content"))}
            calls = [
                {
                    "name": (call.get("function") or {}).get("name", call.get("name", "")),
                    "arguments": (call.get("function") or {}).get("arguments"),
                }
                for call in message.get("tool_calls") or []
            ]
            if calls:
                turn["tool_calls"] = calls
            trajectory.append(turn)
        elif role == "tool":
            name = str(message.get("name", ""))
            record = pending.popleft() if pending and pending[0].tool == name else None
            entry: dict[str, Any] = {
                "role": "tool",
                "name": name,
                "content": _text(message.get("content")),
            }
            if record is not None:
                error = record.outcome.error
                entry["error"] = (
                    {"kind": error.kind.value, "message": error.message} if error else None
                )
                entry["duration_s"] = round(record.outcome.duration_s, 6)
            else:
                # TRL answered it without calling us: a tool the model invented, or arguments
                # that are not an object.
                kind = (
                    ToolErrorKind.BAD_ARGUMENTS
                    if name in known_tools
                    else ToolErrorKind.UNKNOWN_TOOL
                )
                entry["error"] = {"kind": kind.value, "message": entry["content"]}
                entry["duration_s"] = 0.0
            trajectory.append(entry)
    for record in pending:
        # Ran, but TRL dropped its result: the conversation would have passed
        # max_completion_length. The model never saw it; the environment's state did change.
        error = record.outcome.error
        trajectory.append(
            {
                "role": "tool",
                "name": record.tool,
                "content": "" if error else _text(_result_for_record(record.outcome)),
                "error": {"kind": error.kind.value, "message": error.message} if error else None,
                "duration_s": round(record.outcome.duration_s, 6),
                "shown_to_model": False,
            }
        )
    if trajectory:
        last = trajectory[-1]
        # Ended on calls whose answers the model never saw: max_turns or the token budget
        # stopped it.
        unanswered = (last["role"] == "assistant" and bool(last.get("tool_calls"))) or (
            last.get("shown_to_model") is False
        )
        last["truncated"] = truncated or unanswered
        last["masked_tokens"] = masked_tokens
    return trajectory


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part.get("text", "") if isinstance(part, dict) else str(part) for part in content
        )
    return "" if content is None else str(content)


def final_answer(trajectory: Sequence[dict[str, Any]]) -> str:
    """The text of the rollout's last assistant turn: what a per-sample reward scores."""
    for message in reversed(trajectory):
        if message.get("role") == "assistant":
            return str(message.get("content", ""))
    return ""


def agent_metrics(trajectories: Sequence[Sequence[dict[str, Any]]]) -> dict[str, Any]:
    """A step's tool use: per rollout (calls, turns, truncated share) and per tool."""
    rollouts = max(1, len(trajectories))
    per_tool: dict[str, dict[str, Any]] = {}
    calls = turns = truncated = 0
    for trajectory in trajectories:
        turns += sum(1 for message in trajectory if message.get("role") == "assistant")
        truncated += bool(trajectory and trajectory[-1].get("truncated"))
        for message in trajectory:
            if message.get("role") != "tool":
                continue
            calls += 1
            stats = per_tool.setdefault(
                message["name"], {"calls": 0, "errors": 0, "duration_s": 0.0, "error_kinds": {}}
            )
            stats["calls"] += 1
            stats["duration_s"] += float(message.get("duration_s") or 0.0)
            error = message.get("error")
            if error:
                stats["errors"] += 1
                kinds = stats["error_kinds"]
                kinds[error["kind"]] = kinds.get(error["kind"], 0) + 1
    tools = {
        name: {
            "calls": stats["calls"],
            "errors": stats["errors"],
            "error_rate": stats["errors"] / stats["calls"],
            "mean_duration_s": stats["duration_s"] / stats["calls"],
            "error_kinds": stats["error_kinds"],
        }
        for name, stats in sorted(per_tool.items())
    }
    return {
        "tool_calls_per_rollout": calls / rollouts,
        "turns_per_rollout": turns / rollouts,
        "truncated_share": truncated / rollouts,
        "tools": tools,
    }
