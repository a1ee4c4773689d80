"""Turning a Python function into the source text the server runs in its sandbox.

The server receives only text. A function that uses nothing but its parameters, builtins and
its own imports is sent as its own source. One that uses module-level names (imports,
constants, helpers, as tutorial reward files do) is sent with its whole file and its name: the
server keeps the function and what it reaches in that file. Anything else (a lambda, a
closure, a bound method, a name its file does not define) would fail far away on the server;
we refuse it here with a message that says what to change.
"""

from __future__ import annotations

import ast
import builtins
import dis
import inspect
import os
import textwrap
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from rft.errors import RewardFunctionSourceError, RFTError

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
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == function_name:
            if node.decorator_list:
                return "\n".join(source.splitlines()[node.lineno - 1 :]) + "\n"
            break
    return source


def function_source(
    function: Callable[..., Any],
    *,
    name: str | None = None,
    what: str = "reward function",
    error: type[RFTError] = RewardFunctionSourceError,
    how_to_fix: str = _HOW_TO_FIX,
) -> str:
    """The source of a plain top-level-style function, or ``error`` (RewardFunctionSourceError).

    ``what`` names the function's role in the messages ("reward function", "tool"), and
    ``how_to_fix`` says what to do instead: tools reuse these checks with their own words.
    """
    label = f"{what} {name or getattr(function, '__name__', '')!r}"
    if inspect.ismethod(function):
        raise error(
            f"{label} is a bound method ({function.__qualname__}); it would need its instance "
            f"on the server: {how_to_fix}"
        )
    if inspect.isbuiltin(function) or not inspect.isfunction(function):
        raise error(
            f"{label} is a {type(function).__name__}, not a Python function with source: "
            f"{how_to_fix}"
        )
    if function.__name__ == "<lambda>":
        raise error(f"{label} is a lambda, which has no name to call: {how_to_fix}")
    if function.__closure__ or function.__code__.co_freevars:
        captured = ", ".join(function.__code__.co_freevars)
        raise error(
            f"{label} is a closure over {captured}; those values do not "
            f"travel with the source: {how_to_fix}, passing values as constants"
        )
    try:
        source = textwrap.dedent(inspect.getsource(function))
    except (OSError, TypeError):
        raise error(
            f"the source of {label} is not available, as happens for "
            f"functions typed into an interactive interpreter: {how_to_fix}"
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
        raise error(
            f"{label} uses module-level names {', '.join(missing)}, which "
            f"will not exist on the server: import or define them inside the function body"
        )
    return source


def function_reference(
    function: Callable[..., Any], *, name: str | None = None
) -> tuple[str, str | None]:
    """What to send for a function: ``(its source, None)`` when it is self-contained, else
    ``(its module's source, its name)`` when it uses module-level names its file defines.

    The server then keeps the function and the module-level code it reaches (see the
    server's sandbox/reward_modules.py); the rest of the file never runs.
    """
    try:
        return function_source(function, name=name), None
    except RewardFunctionSourceError as error:
        if "module-level names" not in str(error):
            raise
        label = f"reward function {name or function.__name__!r}"
        module_source = _module_source(function)
        if module_source is None:
            raise
    undefined = sorted(
        {
            global_name
            for global_name in _global_names(function.__code__)
            if not hasattr(builtins, global_name)
        }
        - _top_level_names(module_source)
    )
    if undefined:
        raise RewardFunctionSourceError(
            f"{label} uses {', '.join(undefined)}, which its file does not define at module "
            "level (set at run time, or in a notebook): define them in the file or in the "
            "function body"
        )
    return module_source, function.__name__


def _module_source(function: Callable[..., Any]) -> str | None:
    module = inspect.getmodule(function)
    try:
        if module is not None:
            return inspect.getsource(module)
        return Path(inspect.getsourcefile(function) or "").read_text()
    except (OSError, TypeError):
        return None


def _top_level_names(source: str) -> set[str]:
    """Names a module binds at its top level (definitions, imports, assignments)."""
    names: set[str] = set()
    for node in ast.parse(source).body:
        for child in ast.walk(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(child.name)
            elif isinstance(child, ast.Import | ast.ImportFrom):
                names.update(alias.asname or alias.name.split(".")[0] for alias in child.names)
            elif isinstance(child, ast.Name) and isinstance(child.ctx, ast.Store):
                names.add(child.id)
    return names


def module_text(module: str | os.PathLike[str] | types.ModuleType) -> str:
    """The source of a reward file, given as a path or as an imported module."""
    if isinstance(module, types.ModuleType):
        try:
            return inspect.getsource(module)
        except (OSError, TypeError):
            raise RewardFunctionSourceError(
                f"the source of module {module.__name__!r} is not available"
            ) from None
    path = Path(module)
    if not path.is_file():
        raise RewardFunctionSourceError(f"reward module {str(path)!r} is not a file")
    return path.read_text()


def module_functions(
    functions: Mapping[str, float | Mapping[str, Any]] | Sequence[str],
) -> dict[str, dict[str, Any]]:
    """``{name: weight}``, ``{name: {"weight": ..., ...}}`` or names -> the request's form."""
    if isinstance(functions, str):
        functions = [functions]
    if not isinstance(functions, Mapping):
        return {name: {} for name in functions}
    return {
        name: dict(value) if isinstance(value, Mapping) else {"weight": float(value)}
        for name, value in functions.items()
    }


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
