"""Which of the project's modules each module imports when it runs, read from the source:
imports inside functions count; those under TYPE_CHECKING do not (they never run). The layer
tests (tests/unit/test_package_layers.py, tests/unit/test_worker_layers.py) check this graph."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    """Every absolute module name ``path`` imports (``from a import b`` names ``a`` and
    ``a.b``: b may be a module)."""
    found: set[str] = set()

    class Imports(ast.NodeVisitor):
        def visit_If(self, node: ast.If) -> None:
            if "TYPE_CHECKING" in ast.unparse(node.test):
                for child in node.orelse:
                    self.visit(child)
                return
            self.generic_visit(node)

        def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
            if node.module is not None and node.level == 0:
                found.add(node.module)
                found.update(f"{node.module}.{alias.name}" for alias in node.names)

        def visit_Import(self, node: ast.Import) -> None:
            found.update(alias.name for alias in node.names)

    Imports().visit(ast.parse(path.read_text()))
    return found


def package_modules(*packages: str) -> dict[str, Path]:
    return {
        module_name(path): path for package in packages for path in (ROOT / package).rglob("*.py")
    }


def top_package(module: str) -> str:
    return module.split(".", 1)[0]
