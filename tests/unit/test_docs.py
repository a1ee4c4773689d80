"""The docs site's pages stay true to the code: the generated reference pages are current and
cover every setting and hyperparameter, every example compiles, and every Python snippet
imports and calls the SDK (or the openai client) by names that exist.

The site itself (broken links, missing pages) is built by scripts/test.sh with
`mkdocs build --strict`; the snippets are compiled, parsed and run as their markers say by
tests/docs/test_snippets.py; examples that need a running service are run by their own tests
(tests/sdk/test_example.py, tests/sdk/test_agent_example.py).
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.docs.snippets import snippets

ROOT = Path(__file__).resolve().parents[2]


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


gen_reference = _load(ROOT / "scripts" / "gen_reference.py", "gen_reference")


def test_the_generated_reference_pages_are_current() -> None:
    assert gen_reference.stale_pages() == [], "run: python scripts/gen_reference.py"


def test_every_setting_and_hyperparameter_has_a_row() -> None:
    from service.jobs.hyperparameters import Hyperparameters
    from service.settings import Settings

    environment = (ROOT / "docs/reference/environment.md").read_text()
    hyperparameters = (ROOT / "docs/reference/hyperparameters.md").read_text()
    for name in Settings.model_fields:
        assert f"| `RFT_{name.upper()}` |" in environment, name
    for name in Hyperparameters.model_fields:
        assert f"| `{name}` |" in hyperparameters, name


def test_a_field_without_a_description_fails_the_generator() -> None:
    from pydantic import BaseModel

    class Bare(BaseModel):
        nameless: int = 1

    with pytest.raises(gen_reference.MissingDescription, match="nameless"):
        gen_reference._described("Bare", "nameless", Bare.model_fields["nameless"])


def _snippets() -> list[tuple[str, str]]:
    """(page:line, source) of every ```python block of the README and docs/."""
    return [(s.where, s.source) for s in snippets() if s.language == "python"]


@pytest.mark.parametrize("example", sorted((ROOT / "examples").rglob("*.py")), ids=str)
def test_examples_compile(example: Path) -> None:
    compile(example.read_text(), str(example), "exec")


def test_the_gsm8k_rewards_score_the_tutorials_format() -> None:
    rewards = _load(ROOT / "examples/gsm8k/rewards.py", "gsm8k_rewards")
    good = "<reasoning>\n6 * 12 = 72\n</reasoning>\n<answer>\n72\n</answer>\n"
    wrong = "<reasoning>\nguess\n</reasoning>\n<answer>\n70\n</answer>\n"
    loose = "The answer is 72."
    chat = [[{"role": "assistant", "content": good}]]
    assert rewards.correctness_reward_func([""] * 3, [good, wrong, loose], ["72"] * 3) == [
        1.0,
        0.0,
        0.0,
    ]
    assert rewards.correctness_reward_func([""], chat, ["72"]) == [1.0]
    assert rewards.strict_format_reward_func([""] * 3, [good, wrong, loose]) == [1.0, 1.0, 0.0]
    assert rewards.int_reward_func([""] * 2, [good, loose]) == [1.0, 0.0]
    partial, none = rewards.xmlcount_reward_func([""] * 2, [good, loose])
    assert partial > 0.4 and none == 0.0


def _sdk_uses(source: str) -> tuple[list[ast.ImportFrom | ast.Import], list[list[str]]]:
    """A snippet's imports of the SDK (``rft``) and the attribute chains it reads off a client
    (``client.jobs.checkpoints.list`` -> ["jobs", "checkpoints", "list"])."""
    tree = ast.parse(source)
    imports: list[ast.ImportFrom | ast.Import] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "rft":
            imports.append(node)
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "rft" for a in node.names):
            imports.append(node)
    chains = []
    for node in ast.walk(tree):
        names: list[str] = []
        current: ast.expr = node if isinstance(node, ast.Attribute) else ast.Constant(None)
        while isinstance(current, ast.Attribute):
            names.insert(0, current.attr)
            current = current.value
        if isinstance(current, ast.Name) and current.id == "client":
            chains.append(names)
    return imports, chains


# What makes a snippet's ``client``: the SDK's clients and the openai package's.
CLIENT_KINDS = {
    "rft.Client": "rft",
    "Client": "rft",
    "rft.AsyncClient": "rft-async",
    "AsyncClient": "rft-async",
    "openai.OpenAI": "openai",
    "OpenAI": "openai",
}


def _client_kinds() -> dict[str, str | None]:
    """page#n -> the kind of ``client`` the snippet uses: the one it makes, else the one an
    earlier snippet of its page made (pages build a session snippet by snippet), else rft's.
    None: some other client (an HTTP client in a reward function), not checked."""
    kinds: dict[str, str | None] = {}
    page_kind: dict[str, str | None] = {}
    for where, source in _snippets():
        page = where.split(":")[0]
        for node in ast.walk(ast.parse(source)):
            if (
                isinstance(node, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "client" for t in node.targets)
                and isinstance(node.value, ast.Call)
            ):
                page_kind[page] = CLIENT_KINDS.get(ast.unparse(node.value.func))
        kinds[where] = page_kind.get(page, "rft")
    return kinds


@pytest.mark.parametrize(
    ("where", "source"), [pytest.param(*snippet, id=snippet[0]) for snippet in _snippets()]
)
def test_python_snippets_use_the_sdk_as_it_is(where: str, source: str) -> None:
    """Every name a snippet imports from the SDK exists, and so does every attribute it reads
    off its client (a resource or method renamed in the SDK, or in the openai package we
    speak to, fails here rather than for a user)."""
    import openai

    import rft

    imports, chains = _sdk_uses(source)
    for node in imports:
        exec(compile(ast.Module(body=[node], type_ignores=[]), where, "exec"), {})
    kind = _client_kinds()[where]
    clients: dict[str | None, object] = {
        "rft": rft.Client(api_key="k", base_url="http://127.0.0.1:1"),
        "rft-async": rft.AsyncClient(api_key="k", base_url="http://127.0.0.1:1"),
        "openai": openai.OpenAI(api_key="k", base_url="http://127.0.0.1:1/v1"),
    }
    if kind is None:
        return
    for chain in chains:
        found = clients[kind]
        for depth, name in enumerate(chain):
            path = ".".join(chain[: depth + 1])
            assert hasattr(found, name), f"{where}: {kind} client.{path} does not exist"
            found = getattr(found, name)
