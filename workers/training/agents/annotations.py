"""A tool's signature as the sandbox described it, as a Python signature (what TRL reads)."""

from __future__ import annotations

import inspect
from typing import Any

from sandbox.agent_api import ToolSignature
from sandbox.child.agent_code_rules import AgentCodeProblem, annotation_type


def python_signature(tool: ToolSignature, *, method: bool, where: str) -> inspect.Signature:
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
