"""Turning a Python function into the source text the server runs in its sandbox.

The server receives only text, so a function may use nothing but its parameters, builtins and
what it imports inside its own body. Anything else (a lambda, a closure, a bound method, a
module-level import) would fail far away on the server; we refuse it here with a message
that says what to change.
"""

from __future__ import annotations

import ast
import builtins
import dis
import inspect
import textwrap
import types
from collections.abc import Callable, Iterator
from typing import Any

from rft.errors import RewardFunctionSourceError

_HOW_TO_FIX = "define it with `def` at module level in a file, or pass its source as a string"


def _global_names(code: types.CodeType) -> Iterator[str]:
    for instruction in dis.get_instructions(code):
        if instruction.opname in ("LOAD_GLOBAL", "LOAD_NAME") and isinstance(
            instruction.argval, str
        ):
            yield instruction.argval
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):  # comprehensions, nested functions
            yield from _global_names(constant)


def _without_decorators(source: str, function_name: str) -> str:
    """Drop decorator lines: the decorators themselves would not exist on the server."""
    tree = ast.parse(source)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == function_name:
            if node.decorator_list:
                return "\n".join(source.splitlines()[node.lineno - 1 :]) + "\n"
            break
    return source


def function_source(function: Callable[..., Any], *, name: str | None = None) -> str:
    """The source of a plain top-level-style function, or RewardFunctionSourceError."""
    label = f"reward function {name or getattr(function, '__name__', '')!r}"
    if inspect.ismethod(function):
        raise RewardFunctionSourceError(
            f"{label} is a bound method ({function.__qualname__}); it would need its instance "
            f"on the server: {_HOW_TO_FIX}"
        )
    if inspect.isbuiltin(function) or not inspect.isfunction(function):
        raise RewardFunctionSourceError(
            f"{label} is a {type(function).__name__}, not a Python function with source: "
            f"{_HOW_TO_FIX}"
        )
    if function.__name__ == "<lambda>":
        raise RewardFunctionSourceError(
            f"{label} is a lambda, which has no name to call: {_HOW_TO_FIX}"
        )
    if function.__closure__ or function.__code__.co_freevars:
        captured = ", ".join(function.__code__.co_freevars)
        raise RewardFunctionSourceError(
            f"{label} is a closure over {captured}; those values do not "
            f"travel with the source: {_HOW_TO_FIX}, passing values as constants"
        )
    if inspect.iscoroutinefunction(function):
        raise RewardFunctionSourceError(f"{label} is async; reward functions must be plain defs")
    try:
        source = textwrap.dedent(inspect.getsource(function))
    except (OSError, TypeError):
        raise RewardFunctionSourceError(
            f"the source of {label} is not available, as happens for "
            f"functions typed into an interactive interpreter: {_HOW_TO_FIX}"
        ) from None
    source = _without_decorators(source, function.__name__)
    missing = sorted(
        {
            global_name
            for global_name in _global_names(function.__code__)
            if global_name != function.__name__ and not hasattr(builtins, global_name)
        }
    )
    if missing:
        raise RewardFunctionSourceError(
            f"{label} uses module-level names {', '.join(missing)}, which "
            f"will not exist on the server: import or define them inside the function body"
        )
    return source


def to_source(value: Any, *, name: str | None = None) -> str:
    """Source text from a source string or a function (RewardFunction objects give theirs)."""
    if isinstance(value, str):
        return value
    source = getattr(value, "source", None)
    if isinstance(source, str) and not callable(value):
        return source
    if callable(value):
        return function_source(value, name=name)
    raise RewardFunctionSourceError(
        f"reward function {name!r} must be a function, a source string or a RewardFunction, "
        f"not {type(value).__name__}"
    )
