"""The project's packages in layers that point one way (docs/architecture.md): sandbox/ at the
bottom (it runs user code and knows nothing of jobs), service/ above it (the API and what both
sides share: settings, the database, the work queue, the built-in models), workers/ above
service/, and server/ (the `rft-server` command that starts each role) on top. A module imports
only its own package and those below. Inside service/, its foundation (settings, secrets,
database, errors, the repositories' base) imports no domain folder. The SDK (sdk/, the package
`rft`) is installed alone and imports none of them; it is the bottom layer of all, since the
server serves its wire types (docs/architecture.md, "Wire types"). workers/ has layers of its own:
tests/unit/test_worker_layers.py."""

from __future__ import annotations

from pathlib import Path

from tests.import_graph import ROOT, imports_of, package_modules, top_package

# Bottom to top.
PACKAGES = ["sandbox", "service", "workers", "server"]
# The SDK's package (sdk/src/rft), below all of them: any may import its models.
SDK_PACKAGE = "rft"

SERVICE_FOUNDATION = {
    "service.settings",
    "service.secrets",
    "service.db",
    "service.models",
    "service.errors",
    "service.repository",
}


def upward_imports(modules: dict[str, Path]) -> list[str]:
    level = {SDK_PACKAGE: -1} | {package: i for i, package in enumerate(PACKAGES)}
    return sorted(
        f"{module} imports {imported}"
        for module, path in modules.items()
        for imported in imports_of(path)
        if level.get(top_package(imported), -1) > level[top_package(module)]
    )


def test_packages_point_one_way() -> None:
    assert upward_imports(package_modules(*PACKAGES)) == []


def _in_foundation(name: str) -> bool:
    # `from service.settings import get_settings` names service.settings.get_settings too.
    return name in SERVICE_FOUNDATION or name.rpartition(".")[0] in SERVICE_FOUNDATION


def test_the_service_foundation_imports_no_domain() -> None:
    modules = package_modules("service")
    domain_imports = sorted(
        f"{module} imports {imported}"
        for module in SERVICE_FOUNDATION
        for imported in imports_of(modules[module])
        if top_package(imported) == "service" and not _in_foundation(imported)
    )
    assert domain_imports == []


def test_the_sdk_imports_none_of_the_server_packages() -> None:
    sdk = {path: imports_of(path) for path in (ROOT / "sdk" / "src").rglob("*.py")}
    assert [
        f"{path.relative_to(ROOT)} imports {name}"
        for path, names in sdk.items()
        for name in names
        if top_package(name) in PACKAGES
    ] == []


def test_the_check_sees_an_upward_import(tmp_path: Path) -> None:
    """The reader finds imports in functions and skips TYPE_CHECKING ones; the check names the
    module that points up."""
    source = tmp_path / "example.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from workers.tasks import train_job\n"
        "def f():\n    from workers.training_job import run_training_job\n"
    )
    assert upward_imports({"service.example": source}) == [
        "service.example imports workers.training_job",
        "service.example imports workers.training_job.run_training_job",
    ]
