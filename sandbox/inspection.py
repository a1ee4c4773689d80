"""Static checks of reward-function source: which function to call, and in which form.

Nothing here executes user code; everything is read from the syntax tree, so the API can
reject a broken update before any sandbox is involved.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from sandbox.api import RewardCodeError, RewardForm

# The dataset-batch parameter names TRL passes first; a function that starts with one of them
# is a batch function whatever else it declares.
BATCH_FIRST_PARAMETERS = frozenset({"prompts", "completions"})
# f(prompt, completion, example, messages): a per-sample function that reads its sample's
# conversation (the reward child passes it as a keyword, in every job).
SAMPLE_MESSAGES_PARAMETER = "messages"

ACCEPTED_SIGNATURES = (
    "a reward function must have one of two signatures: "
    "f(prompt, completion, example) -> float, called once per sample (it may add a "
    "`messages` parameter: the sample's conversation), or "
    "f(prompts, completions, **kwargs) -> list[float], called once per batch"
)


@dataclass(frozen=True)
class RewardEntryPoint:
    """The function the sandbox calls for one reward-function source."""

    function_name: str  # the `def` to call, which may differ from the reward's own name
    form: RewardForm
    line: int


def inspect_reward_source(name: str, source: str) -> RewardForm:
    """Return the form of the reward function `name` defined in `source`.

    See :func:`find_reward_entry_point` for how the function is chosen and the form decided.
    Raises RewardCodeError when the source does not parse or defines no usable function.
    """
    return find_reward_entry_point(name, source).form


def find_reward_entry_point(name: str, source: str) -> RewardEntryPoint:
    """Choose the function to call in `source` and decide its form, without running it.

    Which function: the top-level ``def`` named `name` if there is one; otherwise the only
    top-level ``def``; otherwise the last top-level ``def`` (helpers usually come first).

    Which form:

    - BATCH when the first parameter is named ``prompts`` or ``completions`` (TRL style);
    - SAMPLE when it can be called with exactly three positional arguments
      ``(prompt, completion, example)``, whatever their names;
    - BATCH when it takes ``**kwargs`` and cannot be called that way;
    - anything else is a RewardCodeError that names the two accepted signatures.
    """
    tree = parse_reward_code(name, source, filename=f"<reward {name}>", what="the source")

    definitions = [
        node for node in tree.body if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    ]
    if not definitions:
        raise RewardCodeError(
            name, f"the source defines no top-level function; {ACCEPTED_SIGNATURES}"
        )
    named = [node for node in definitions if node.name == name]
    chosen = named[-1] if named else definitions[-1]

    form = _decide_form(name, chosen)
    return RewardEntryPoint(function_name=chosen.name, form=form, line=chosen.lineno)


def parse_reward_code(name: str, source: str, *, filename: str, what: str) -> ast.Module:
    """``ast.parse``, with every way it refuses source as a RewardCodeError naming `name`;
    `what` says what was parsed ("the source", "the module")."""
    try:
        return ast.parse(source, filename=filename)
    except SyntaxError as error:
        where = f"line {error.lineno}: " if error.lineno is not None else ""
        context = "" if what == "the source" else f" in {what}"
        raise RewardCodeError(name, f"syntax error{context} at {where}{error.msg}") from None
    except ValueError as error:  # e.g. null bytes in the source
        raise RewardCodeError(name, f"cannot parse {what}: {error}") from None
    except (RecursionError, MemoryError):
        # How CPython's parser gives up on expressions nested past its stack (a 200 kB
        # source of unary minuses or chained attributes): not our memory running out.
        raise RewardCodeError(
            name, f"cannot parse {what}: its expressions are nested too deeply"
        ) from None


def _decide_form(name: str, function: ast.FunctionDef | ast.AsyncFunctionDef) -> RewardForm:
    arguments = function.args
    positional = [*arguments.posonlyargs, *arguments.args]
    if positional and positional[0].arg in BATCH_FIRST_PARAMETERS:
        return RewardForm.BATCH

    # A per-sample function gets its sample's `messages` when it names them, so a fourth
    # parameter of that name is not required positionally.
    required_positional = len(positional) - len(arguments.defaults)
    if len(positional) == 4 and positional[3].arg == SAMPLE_MESSAGES_PARAMETER:
        positional = positional[:3]
        required_positional = min(required_positional, 3)
    required_keyword_only = [
        argument.arg
        for argument, default in zip(arguments.kwonlyargs, arguments.kw_defaults, strict=True)
        if default is None and argument.arg != SAMPLE_MESSAGES_PARAMETER
    ]
    takes_three_positional = required_positional <= 3 and (
        len(positional) >= 3 or arguments.vararg is not None
    )
    if takes_three_positional and not required_keyword_only:
        return RewardForm.SAMPLE
    if arguments.kwarg is not None:
        return RewardForm.BATCH

    declared = ast.unparse(arguments)
    raise RewardCodeError(
        name,
        f"cannot call {function.name}({declared}) (line {function.lineno}); {ACCEPTED_SIGNATURES}",
    )
