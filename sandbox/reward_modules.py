"""Reward functions taken out of a whole module (a tutorial's reward file), with what they use.

A reward file keeps imports, constants and helpers at module level, and often more: dataset
loading, a trainer, a ``__main__`` block, imports of torch. Each reward function is stored and
versioned on its own, as the part of the file it needs: the top-level statements binding the
module-level names it reaches, transitively, in file order, and the function itself last. So a
change to a helper gives a new version to exactly the functions that use it, a config shows
each function's own code (not the whole file once per function), and the rest of the file
(``load_dataset(...)`` at module level) never runs in the sandbox.

Nothing here executes user code: names are read from the syntax tree and symbol tables.
"""

from __future__ import annotations

import ast
import symtable

from sandbox.api import RewardCodeError
from sandbox.inspection import parse_reward_code


def extract_reward_function(name: str, module_source: str, function_name: str) -> str:
    """The source of `function_name` from `module_source`, with everything it reaches.

    `name` is the reward's name, for error messages. Raises RewardCodeError when the module
    does not parse or has no top-level function `function_name`.
    """
    tree = parse_reward_code(
        name, module_source, filename=f"<reward module {name}>", what="the module"
    )
    statements = tree.body
    entries = [
        index
        for index, node in enumerate(statements)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == function_name
    ]
    if not entries:
        defined = sorted(
            node.name
            for node in statements
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        )
        raise RewardCodeError(
            name,
            f"the module has no top-level function {function_name!r} "
            f"(it defines: {', '.join(defined) or 'none'})",
        )
    entry = entries[-1]
    lines = module_source.splitlines(keepends=True)
    segments = [_segment(lines, node) for node in statements]

    binders: dict[str, list[int]] = {}
    for index, node in enumerate(statements):
        for bound in _bound_names(node):
            binders.setdefault(bound, []).append(index)
    needed = {entry}
    pending = [entry]
    while pending:
        index = pending.pop()
        for used in _used_names(segments[index], statements[index]):
            for binder in binders.get(used, ()):
                if binder not in needed:
                    needed.add(binder)
                    pending.append(binder)
    needed |= {
        index
        for index, node in enumerate(statements)
        if isinstance(node, ast.ImportFrom) and node.module == "__future__"
    }
    # The function last: the sandbox calls the last definition when the names differ, and a
    # definition placed later still sees every name the statements before it bind.
    order = [index for index in range(len(statements)) if index in needed and index != entry]
    parts = [segments[index].rstrip() for index in order]
    parts.append(segments[entry].rstrip())
    return "\n\n".join(part for part in parts if part) + "\n"


def _segment(lines: list[str], node: ast.stmt) -> str:
    first = min(
        [node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))],
    )
    last = node.end_lineno or node.lineno
    return "".join(lines[first - 1 : last])


def _bound_names(node: ast.stmt) -> set[str]:
    """Module-level names a top-level statement binds or changes in place.

    ``CACHE["k"] = v`` and ``random.seed(0)`` count as changing CACHE and random: they are kept
    whenever CACHE or random is, so the function sees the module as the file left it.
    """
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return {node.name}
    bound: set[str] = set()
    pending: list[ast.AST] = [node]
    while pending:
        current = pending.pop()
        if isinstance(current, ast.Import | ast.ImportFrom):
            for alias in current.names:
                if alias.name != "*":
                    bound.add(alias.asname or alias.name.split(".")[0])
            continue
        if isinstance(current, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(current.name)  # a definition inside `if` or `try` at module level
            continue
        if isinstance(current, ast.Lambda):
            continue
        if isinstance(current, ast.Name) and isinstance(current.ctx, ast.Store | ast.Del):
            bound.add(current.id)
        elif isinstance(current, ast.Subscript | ast.Attribute) and isinstance(
            current.ctx, ast.Store
        ):
            base = _base_name(current)
            if base is not None:
                bound.add(base)
        elif isinstance(current, ast.Expr) and isinstance(current.value, ast.Call):
            function = current.value.func
            if isinstance(function, ast.Attribute):
                base = _base_name(function)
                if base is not None:
                    bound.add(base)
        pending.extend(ast.iter_child_nodes(current))
    return bound


def _base_name(node: ast.expr) -> str | None:
    while isinstance(node, ast.Attribute | ast.Subscript):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _used_names(segment: str, node: ast.stmt) -> set[str]:
    """Module-level names a top-level statement reads, at once or when its functions run."""
    try:
        table = symtable.symtable(segment, "<statement>", "exec")
    except SyntaxError:
        return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    return _global_references(table)


def _global_references(table: symtable.SymbolTable) -> set[str]:
    module_level = table.get_type() == "module"
    names = {
        symbol.get_name()
        for symbol in table.get_symbols()
        if symbol.is_referenced() and (module_level or symbol.is_global())
    }
    for child in table.get_children():
        names |= _global_references(child)
    return names
