"""A job's tools and environments on one rank: the stand-ins TRL holds, the rounds of calls
they make (run at once in the sandbox), and what each rollout did."""

from __future__ import annotations

import collections
import inspect
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
    ToolSpec,
)
from sandbox.api import FunctionResult, RewardError, RewardErrorKind
from sandbox.child.agent_code_rules import AgentCodeProblem, check_loaded_code
from workers.training.agents.stand_ins import (
    BadArguments,
    EnvironmentStandin,
    ToolCallFailed,
    result_for_model,
    standin,
)
from workers.training.agents.trajectories import CallRecord, build_trajectory

logger = logging.getLogger(__name__)


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
            standin(
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
            members[method.name] = standin(
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
        if isinstance(arguments, BadArguments):
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
        return result_for_model(outcome)

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


def _reward_error_kind(kind: ToolErrorKind) -> RewardErrorKind:
    return {
        ToolErrorKind.TIMEOUT: RewardErrorKind.TIMEOUT,
        ToolErrorKind.KILLED: RewardErrorKind.KILLED,
        ToolErrorKind.INVALID_RETURN: RewardErrorKind.INVALID_RETURN,
        ToolErrorKind.SANDBOX: RewardErrorKind.SANDBOX,
        ToolErrorKind.ENVIRONMENT_LOST: RewardErrorKind.SANDBOX,
    }.get(kind, RewardErrorKind.EXCEPTION)
