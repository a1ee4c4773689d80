"""What tool and environment code must be for the model to be shown it: the one rule set.

Used in three places, which must agree: the agent child describes the user's functions with
it inside the sandbox (``describe_function``, ``environment_methods``), and both the API
(at job creation and config updates) and the worker (when it loads a job's code) check the
descriptions the sandbox returns with ``check_loaded_code``. The worker also reads the type
hints with ``annotation_type`` to build the stand-ins TRL holds.

The type-hint and docstring rules are those transformers' ``get_json_schema`` applies when TRL
renders a tool into the prompt (transformers 5.x, ``utils/chat_template_utils.py``): a tool
that passes here renders there, instead of failing mid-step.

Standard library only, and no imports outside this folder: it is part of the child programs'
package, which sandbox/isolation.py binds into the sandbox.
"""

from __future__ import annotations

import ast
import inspect
import json
import re
import typing
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from .runtime import short_repr

if TYPE_CHECKING:
    from sandbox.agent_api import LoadedAgentCode, ToolSignature

# Names an annotation may use: what a tool schema can describe (transformers' get_json_schema
# maps these to JSON types). The worker never evaluates user text beyond them.
ANNOTATION_NAMES: dict[str, Any] = {
    "str": str,
    "int": int,
    "float": float,
    "bool": bool,
    "list": list,
    "dict": dict,
    "tuple": tuple,
    "None": None,
    "Any": typing.Any,
    "Optional": typing.Optional,
    "Union": typing.Union,
    "Literal": typing.Literal,
    "List": list,
    "Dict": dict,
    "Tuple": tuple,
}
_PLAIN_TYPES = (int, float, str, bool, type(None), list, tuple, dict, typing.Any)
_JSON_SCALARS = (int, float, str, bool, type(None))
# transformers' Google-style docstring sections (chat_template_utils: args_re, args_split_re).
_ARGS_SECTION = re.compile(r"\n\s*Args:\n(.*?)[\n\s]*(Returns:|Raises:|\Z)", re.DOTALL)
_ARGUMENT_ENTRY = re.compile(
    r"""
(?:^|\n)
([ \t]*)(\w+)(?:[ \t]*\([^()\n]*\))?:\s*
(.*?)\s*
(?=\n(?!\1[ \t])[ \t]*\w+(?:[ \t]*\([^()\n]*\))?:|\Z)
""",
    re.DOTALL | re.VERBOSE,
)
_CHOICES = re.compile(r"\(choices:\s*(.*?)\)\s*$", re.IGNORECASE)


class AgentCodeProblem(Exception):
    """Code the model cannot be shown. ``name`` is the tool's or environment's name;
    ``message`` says where (``square_root(x)``, ``Counter.add``) and what to change."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name = name
        self.message = message


# -- describing live objects (inside the sandbox) ----------------------------------------------


def describe_function(
    name: str, function: Callable[..., Any], drop_first: bool, module_name: str, *, owner: str
) -> tuple[dict[str, Any], inspect.Signature]:
    """What the model is shown of ``function`` (called ``name`` in messages; ``owner`` is the
    tool or environment it belongs to), and the signature calls bind against."""
    signature = inspect.signature(function)
    parameters = list(signature.parameters.values())
    if drop_first and parameters:
        parameters = parameters[1:]  # self, or cls of a classmethod
    described = []
    for parameter in parameters:
        where = f"{name}({parameter.name})"
        if parameter.kind is inspect.Parameter.POSITIONAL_ONLY:
            raise AgentCodeProblem(
                owner,
                f"{where}: the parameter is positional-only, but the model passes "
                "arguments by name",
            )
        if parameter.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            continue  # binds whatever else comes, but is nothing the model can be shown
        has_default = parameter.default is not inspect.Parameter.empty
        if has_default:
            try:
                json.dumps(parameter.default, allow_nan=False)
            except (TypeError, ValueError):
                raise AgentCodeProblem(
                    owner,
                    f"{where}: the default {short_repr(parameter.default)} is not "
                    "JSON-compatible (the model is shown it)",
                ) from None
        described.append(
            {
                "name": parameter.name,
                "annotation": _annotation_text(parameter.annotation, module_name, where, owner),
                "has_default": has_default,
                "default": parameter.default if has_default else None,
            }
        )
    description = {
        "name": name,
        "doc": function.__doc__ or "",
        "parameters": described,
        "returns": _annotation_text(
            signature.return_annotation, module_name, f"{name} return", owner
        ),
        "is_async": inspect.iscoroutinefunction(function),
    }
    return description, signature.replace(parameters=parameters)


def environment_methods(cls: type, owner: str) -> Iterator[tuple[str, Callable[..., Any], bool]]:
    """An environment class's tools: (name, function, whether its first parameter is bound)
    for each public method other than reset and get_reward. A class without ``reset`` is
    refused: TRL resets an instance at the start of each rollout."""
    if not callable(getattr(cls, "reset", None)):
        raise AgentCodeProblem(owner, f"class {cls.__name__} has no reset method")
    seen: set[str] = set()
    for klass in cls.__mro__:
        if klass is object:
            continue
        for attribute, raw in vars(klass).items():
            if attribute.startswith("_") or attribute in ("reset", "get_reward", *seen):
                continue
            if isinstance(raw, staticmethod):
                function, drop_first = raw.__func__, False
            elif isinstance(raw, classmethod):
                function, drop_first = raw.__func__, True
            elif inspect.isfunction(raw):
                function, drop_first = raw, True
            else:
                continue  # attributes and properties are no tools
            seen.add(attribute)
            yield attribute, function, drop_first


def _annotation_text(annotation: Any, module_name: str, where: str, owner: str) -> str | None:
    if annotation is inspect.Parameter.empty:
        return None
    if isinstance(annotation, str):  # `from __future__ import annotations`: the source text
        if len(annotation) >= 2 and annotation[0] == annotation[-1] and annotation[0] in "'\"":
            return annotation[1:-1]  # a quoted annotation under that import: its text
        return annotation
    text = inspect.formatannotation(annotation, module_name).replace(f"{module_name}.", "")
    if " at 0x" in text:
        raise AgentCodeProblem(
            owner, f"{where}: the annotation {text} cannot be shown to the model"
        )
    return text


# -- checking descriptions (the API and the worker) ---------------------------------------------


def check_loaded_code(code: LoadedAgentCode) -> None:
    """Every tool and environment method of ``code`` can be shown to the model; else
    AgentCodeProblem naming the first that cannot."""
    for tool in code.tools:
        check_tool(tool, owner=tool.name, where=tool.name)
    for environment in code.environments.values():
        for method in environment.methods:
            check_tool(
                method, owner=environment.name, where=f"{environment.class_name}.{method.name}"
            )


def check_tool(tool: ToolSignature, *, owner: str, where: str) -> None:
    """One tool's type hints and docstring, as get_json_schema reads them."""
    for parameter in tool.parameters:
        annotation_type(parameter.annotation, owner=owner, where=f"{where}({parameter.name})")
    doc = inspect.cleandoc(tool.doc).strip() if tool.doc else ""
    if not doc:
        raise AgentCodeProblem(
            owner, f"{where}: a tool needs a docstring (the model is shown it as the description)"
        )
    described = _documented_arguments(doc)
    for parameter in tool.parameters:
        text = described.get(parameter.name)
        if text is None:
            raise AgentCodeProblem(
                owner,
                f"{where}: the docstring has no description of {parameter.name!r} "
                f"(an `Args:` section with a line `{parameter.name}: ...`)",
            )
        choices = _CHOICES.search(text)
        if choices:
            try:
                listed = json.loads(choices.group(1))
            except ValueError:
                listed = None
            if not isinstance(listed, list):
                raise AgentCodeProblem(
                    owner,
                    f"{where}: the choices of {parameter.name!r} are not a JSON list: "
                    f"{choices.group(1)}",
                )


def _documented_arguments(doc: str) -> dict[str, str]:
    section = _ARGS_SECTION.search(doc)
    if section is None:
        return {}
    lines = "\n".join(line for line in section.group(1).split("\n") if line.strip())
    return {
        match[1]: re.sub(r"\s*\n+\s*", " ", match[2].strip())
        for match in _ARGUMENT_ENTRY.findall(lines)
    }


def annotation_type(text: str | None, *, owner: str, where: str) -> Any:
    """The type an annotation's source text names, read from a closed set of names (user text
    is never evaluated), and one a JSON schema can describe; else AgentCodeProblem."""
    if text is None:
        raise AgentCodeProblem(
            owner, f"{where}: every parameter needs a type hint (the model is shown it)"
        )
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        raise AgentCodeProblem(owner, f"{where}: cannot read the type hint {text!r}") from None
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            continue  # typing.Optional: only its last name is looked up (below)
        if isinstance(node, ast.Name) and node.id not in ANNOTATION_NAMES:
            allowed = ", ".join(sorted(ANNOTATION_NAMES))
            raise AgentCodeProblem(
                owner,
                f"{where}: type hint {text!r}: {node.id!r} cannot be shown to the model "
                f"({allowed})",
            )
        if not isinstance(
            node,
            ast.Expression
            | ast.Name
            | ast.Subscript
            | ast.Tuple
            | ast.BinOp
            | ast.BitOr
            | ast.Constant
            | ast.Load,
        ):
            raise AgentCodeProblem(owner, f"{where}: cannot read the type hint {text!r}")
    hint = _evaluate(tree.body, owner=owner, where=where, text=text)
    _check_schema_type(hint, owner=owner, where=where, text=text)
    return hint


def _evaluate(node: ast.expr, *, owner: str, where: str, text: str) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return ANNOTATION_NAMES[node.id]
    if isinstance(node, ast.Attribute):
        if node.attr not in ANNOTATION_NAMES:
            raise AgentCodeProblem(
                owner, f"{where}: type hint {text!r}: {node.attr!r} is not supported"
            )
        return ANNOTATION_NAMES[node.attr]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        left = _evaluate(node.left, owner=owner, where=where, text=text)
        right = _evaluate(node.right, owner=owner, where=where, text=text)
        try:
            return typing.Union[left, right]  # noqa: UP007 - built from values, not syntax
        except TypeError as error:
            raise AgentCodeProblem(owner, f"{where}: type hint {text!r}: {error}") from None
    if isinstance(node, ast.Subscript):
        base = _evaluate(node.value, owner=owner, where=where, text=text)
        if isinstance(node.slice, ast.Tuple):
            arguments = tuple(
                _evaluate(e, owner=owner, where=where, text=text) for e in node.slice.elts
            )
        else:
            arguments = (_evaluate(node.slice, owner=owner, where=where, text=text),)
        try:
            return base[arguments if len(arguments) > 1 else arguments[0]]
        except TypeError as error:
            raise AgentCodeProblem(owner, f"{where}: type hint {text!r}: {error}") from None
    raise AgentCodeProblem(owner, f"{where}: cannot read the type hint {text!r}")


def _check_schema_type(hint: Any, *, owner: str, where: str, text: str) -> None:
    """transformers' _parse_type_hint: what it refuses is refused here, with its reason."""
    origin, arguments = typing.get_origin(hint), typing.get_args(hint)

    def refuse(reason: str) -> AgentCodeProblem:
        return AgentCodeProblem(owner, f"{where}: type hint {text!r}: {reason}")

    def check_each(hints: Sequence[Any]) -> None:
        for inner in hints:
            _check_schema_type(inner, owner=owner, where=where, text=text)

    if origin is None:
        if hint is None or hint in _PLAIN_TYPES:
            return
        raise refuse("no JSON schema describes it (use str, int, float, bool, list, dict, ...)")
    if origin is typing.Union:
        check_each([inner for inner in arguments if inner is not type(None)])
    elif origin is typing.Literal:
        if not arguments or any(type(value) not in _JSON_SCALARS for value in arguments):
            raise refuse("a Literal may list only str, int, float, bool and None values")
    elif origin is list:
        check_each(arguments[:1])
    elif origin is tuple:
        if len(arguments) == 1:
            raise refuse("a tuple of one element: use list[...] or the element itself")
        if ... in arguments:
            raise refuse("a variable-length tuple: use list[...]")
        check_each(arguments)
    elif origin is dict:
        check_each(arguments[1:2])
    else:
        raise refuse("no JSON schema describes it")
