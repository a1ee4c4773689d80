"""The docs' code snippets, read from the site's pages: README.md, docs/**/*.md and the files
they include (sdk/README.md, bench/README.md).

Every ```python, ```bash, ```sh, ```shell and ```console block carries a marker, an HTML
comment on the line right above its fence, that says how tests/docs/test_snippets.py checks it
(docs/internals/testing.md, "Docs snippets"):

    <!-- snippet: run -->          run against the test stack
    <!-- snippet: reward -->       reward functions: each passes the pre-flight
    <!-- snippet: reward PKG,.. -->  ... given these runtime_packages
    <!-- snippet: file NAME -->    a file the page's run snippets use, written as NAME
    <!-- snippet: fragment -->     a piece of a larger example: syntax only
    <!-- snippet: gpu-only -->     trains a real model or needs GPUs: syntax only
    <!-- snippet: setup -->        installs, configures or starts a deployment: syntax only

docs/migrate-from-openai.md's ``<!-- example: NAME -->`` blocks are run, by name, by
tests/api/test_migration_examples.py. A block without a marker fails the test.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The languages whose blocks must carry a marker: the ones a reader copies and runs.
CHECKED_LANGUAGES = {"python", "bash", "sh", "shell", "console"}
SHELL_LANGUAGES = CHECKED_LANGUAGES - {"python"}
KINDS = {
    "run": "run against the test stack (Python: RFT_BASE_URL and RFT_API_KEY set; shell: RFT, "
    "KEY and H as the quickstart sets them, curl failing on an HTTP error)",
    "reward": "reward functions: each one is scored in the pre-flight the API runs",
    "file": "a file the page's run snippets use, written under the name the marker gives",
    "fragment": "a piece of a larger example (placeholders, names from other blocks): syntax only",
    "gpu-only": "trains a real model or needs GPUs: syntax only",
    "setup": "installs, configures or starts a deployment (pip, apt, docker, rft-server, "
    "environment files, scripts/*.sh): syntax only",
    # docs/migrate-from-openai.md's own markers, run by name by its test.
    "example": "run by tests/api/test_migration_examples.py",
}
# Pages whose ``<!-- example: NAME -->`` blocks a test of their own runs.
EXAMPLE_PAGES = {"docs/migrate-from-openai.md": "tests/api/test_migration_examples.py"}

FENCE = re.compile(r"^(?P<indent>\s*)```(?P<language>[\w-]*)\s*$")
MARKER = re.compile(
    r"^\s*<!-- (?:snippet: (?P<kind>[\w-]+)(?: (?P<argument>\S+))?|"
    r"example: (?P<example>[\w-]+)) -->\s*$"
)
# A path in the repository a snippet names (examples/gsm8k/rewards.py, service/demo/...): a
# word starting one of the repository's top folders, not part of a longer path or URL.
TOP_FOLDERS = (
    "bench",
    "docs",
    "examples",
    "migrations",
    "sandbox",
    "scripts",
    "sdk",
    "service",
    "tests",
    "workers",
)
REPO_PATH = re.compile(rf"(?<![\w/.$-])((?:{'|'.join(TOP_FOLDERS)})/[\w./-]*[\w-])")


@dataclass(frozen=True)
class Snippet:
    page: str  # relative to the repository
    line: int  # the opening fence's line, from 1
    language: str
    source: str
    kind: str | None  # None: no marker
    argument: str | None  # file: the file's name; example: the example's name

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def shell(self) -> str:
        """The commands of a shell block: a console block's ``$ `` lines (its output left out)."""
        if self.language != "console":
            return self.source
        return "\n".join(
            line.removeprefix("$ ") for line in self.source.splitlines() if line.startswith("$ ")
        )

    def repo_paths(self) -> list[str]:
        """The repository paths this snippet names (that must exist)."""
        return sorted(set(REPO_PATH.findall(self.source)))


# A page including another file whole (pymdownx.snippets): its blocks are the site's too.
INCLUDE = re.compile(r'^--8<-- "([^"]+)"\s*$', re.M)


def pages() -> list[Path]:
    """The README, every page of docs/, and the files pages include (sdk/README.md, ...)."""
    found = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    included = {ROOT / name for page in found for name in INCLUDE.findall(page.read_text())}
    return [*found, *sorted(included - set(found))]


def read_snippets(page: Path) -> list[Snippet]:
    """Every fenced block of ``page`` (any language), with the marker right above it."""
    lines = page.read_text().splitlines()
    found = []
    number = 0
    while number < len(lines):
        opening = FENCE.match(lines[number])
        if opening is None:
            number += 1
            continue
        indent = len(opening["indent"])
        end = number + 1
        while end < len(lines) and not re.match(r"^\s*```\s*$", lines[end]):
            end += 1
        body = "\n".join(line[indent:] for line in lines[number + 1 : end])
        marker = MARKER.match(lines[number - 1]) if number > 0 else None
        kind = argument = None
        if marker is not None:
            kind = marker["kind"] or "example"
            argument = marker["argument"] or marker["example"]
        found.append(
            Snippet(
                page=str(page.relative_to(ROOT)),
                line=number + 1,
                language=opening["language"],
                source=body + "\n",
                kind=kind,
                argument=argument,
            )
        )
        number = end + 1
    return found


def snippets() -> list[Snippet]:
    """The blocks a reader runs: Python and shell, on every page."""
    return [
        snippet
        for page in pages()
        for snippet in read_snippets(page)
        if snippet.language in CHECKED_LANGUAGES
    ]


def page_files(page: str) -> dict[str, str]:
    """The ``file`` blocks of ``page``, any language: name -> content."""
    return {
        snippet.argument: snippet.source
        for snippet in read_snippets(ROOT / page)
        if snippet.kind == "file" and snippet.argument
    }


@dataclass(frozen=True)
class DocumentedReward:
    """One function of a ``reward`` snippet: the snippet's whole source (its imports and
    helpers travel with it), and the runtime packages its marker names (``reward pytest``)."""

    where: str
    source: str
    runtime_packages: tuple[str, ...]


def documented_rewards() -> dict[str, DocumentedReward]:
    """name -> each top-level function of every ``reward`` snippet, as the docs write it."""
    found: dict[str, DocumentedReward] = {}
    for snippet in snippets():
        if snippet.kind != "reward":
            continue
        packages = tuple(snippet.argument.split(",")) if snippet.argument else ()
        for node in ast.parse(snippet.source).body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                assert node.name not in found, f"{snippet.where}: a second {node.name!r}"
                found[node.name] = DocumentedReward(snippet.where, snippet.source, packages)
    return found
