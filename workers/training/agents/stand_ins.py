"""Stand-ins: what TRL holds in place of the user's tools and environments. Each has the user's
name, signature and docstring; its body forwards the call to the job's AgentSession."""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from sandbox.agent_api import AgentCodeError, ToolOutcome, ToolSignature
from workers.training.agents.annotations import python_signature

if TYPE_CHECKING:
    from workers.training.agents.session import AgentSession

# Text of a tool message whose call failed, as TRL itself words failures ({"error": str(e)}).
ERROR_KEY = "error"


class ToolCallFailed(Exception):
    """Raised by a stand-in for a call that failed: TRL turns it into the tool message
    ``{"error": message}`` for the model, counts it as a failure and goes on."""


def standin(
    tool: ToolSignature,
    forward: Callable[[Any, dict[str, Any]], Any],
    *,
    method: bool,
    where: str,
) -> Callable[..., Any]:
    """A function TRL sees as the user's tool: same name, signature, hints and docstring; its
    body forwards the call. The arguments are bound here, so arguments the model got wrong
    are a recorded BAD_ARGUMENTS error rather than a TypeError raised before any code runs."""
    signature = python_signature(tool, method=method, where=where)
    call_signature = signature.replace(parameters=list(signature.parameters.values())[method:])

    def standin(*args: Any, **kwargs: Any) -> Any:
        owner = args[0] if method else None
        positional = args[1:] if method else args
        return forward(owner, bind_arguments(call_signature, tool.name, positional, kwargs))

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


class BadArguments(dict[str, Any]):
    """Arguments that did not bind: their reason travels with them to the session."""

    reason = ""


def bind_arguments(
    signature: inspect.Signature, name: str, args: Sequence[Any], kwargs: dict[str, Any]
) -> dict[str, Any]:
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError as error:
        bad = BadArguments(kwargs)
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


def result_for_model(outcome: ToolOutcome) -> Any:
    if outcome.error is not None:
        raise ToolCallFailed(f"{outcome.error.kind.value}: {outcome.error.message}")
    result = outcome.result
    # TRL passes a list through as content blocks (images, text parts) and str()s anything else:
    # a JSON text is what models are trained to read for structured results.
    if isinstance(result, list | dict):
        return json.dumps(result, ensure_ascii=False)
    return result
