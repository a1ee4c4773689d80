"""Processes reward code starts: `python`, `python3` and sys.executable are the sandbox's own
interpreter with the job's packages, inside the same sandbox and limits as the code itself.

Code-execution rewards (run the dataset's tests on the completion with `python -m pytest`)
depend on it; tests/code_rewards.py holds the one docs/guides/code-execution.md shows.
"""

from __future__ import annotations

import json
import shutil
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from sandbox.api import FunctionResult, RewardFunctionSpec, ScoringBatch
from sandbox.isolation import detect_isolation, plan_launch
from sandbox.reward_host import ProcessSandbox
from sandbox.runtime_packages import install_runtime_packages
from sandbox.settings import Isolation, SandboxSettings
from tests.code_rewards import PASSES_TESTS, RIGHT, TESTS, WRONG
from tests.layers import needs_layer

BWRAP = detect_isolation()
NEEDS_BWRAP = needs_layer(BWRAP, f"bubblewrap unusable: {BWRAP.reason}")
MODES = ["none", pytest.param("bwrap", marks=NEEDS_BWRAP)]

# Runs every way of naming the interpreter and reports what each found, as JSON in the logs.
INTERPRETERS = """
import json, os, shutil, subprocess, sys

REPORT = (
    "import importlib.util, json, os, sys; print(json.dumps({"
    "'python': os.path.realpath(sys.executable),"
    "'helpers': importlib.util.find_spec('job_helpers') is not None,"
    "'worker_stack': importlib.util.find_spec('pytest') is not None}))"
)

def interpreters(prompts, completions, **kwargs):
    found = {"child": os.path.realpath(sys.executable), "on_path": shutil.which("python")}
    for name in ("python", "python3", f"python3.{sys.version_info.minor}", sys.executable):
        run = subprocess.run([name, "-c", REPORT], capture_output=True, text=True, timeout=20)
        found[name] = json.loads(run.stdout) if run.returncode == 0 else run.stderr[-500:]
    print(json.dumps(found))
    return [1.0 for _ in completions]
"""

# What a grandchild process sees of its sandbox, beside what the reward process itself sees.
CONFINEMENT = """
import json, os, resource, socket, subprocess, sys

REPORT = r'''
import json, os, resource, socket
status = dict(line.split(":", 1) for line in open("/proc/self/status"))
try:
    socket.create_connection(("1.1.1.1", 53), timeout=2).close()
    network = True
except OSError:
    network = False
print(json.dumps({
    "uid": os.getuid(),
    "seccomp": status["Seccomp"].strip(),
    "no_new_privs": status["NoNewPrivs"].strip(),
    "cgroup": open("/proc/self/cgroup").read(),
    "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
    "nproc": resource.getrlimit(resource.RLIMIT_NPROC),
    "address_space": resource.getrlimit(resource.RLIMIT_AS),
    "network": network,
    "writable_packages": os.access("/opt/rft/packages/0", os.W_OK),
}))
'''

def confinement(prompts, completions, **kwargs):
    own = {
        "uid": os.getuid(),
        "cgroup": open("/proc/self/cgroup").read(),
        "nproc": list(resource.getrlimit(resource.RLIMIT_NPROC)),
        "address_space": list(resource.getrlimit(resource.RLIMIT_AS)),
    }
    run = subprocess.run(["python", "-c", REPORT], capture_output=True, text=True, timeout=20)
    print(json.dumps({"own": own, "child": json.loads(run.stdout) if run.stdout else run.stderr}))
    return [1.0 for _ in completions]
"""


def spec(name: str, source: str) -> RewardFunctionSpec:
    return RewardFunctionSpec(name=name, source=textwrap.dedent(source))


def run_once(
    settings: SandboxSettings,
    function: RewardFunctionSpec,
    completions: list[str] | None = None,
    examples: list[dict[str, Any]] | None = None,
) -> FunctionResult:
    """Score one batch in a sandbox of its own; the function must raise no error."""
    completions = completions or ["a"]
    batch = ScoringBatch(
        prompts=["p"] * len(completions),
        completions=completions,
        examples=examples or [{}] * len(completions),
    )
    with ProcessSandbox(settings) as sandbox:
        sandbox.load([function])
        result = sandbox.score(batch)[function.name]
    assert not result.errors, (result.errors, result.logs)
    return result


def report(result: FunctionResult) -> dict[str, Any]:
    """The JSON line the function printed last."""
    found: dict[str, Any] = json.loads(result.logs.strip().splitlines()[-1])
    return found


@pytest.fixture
def job_packages(tmp_path: Path) -> Path:
    packages = tmp_path / "packages"
    (packages / "job_helpers").mkdir(parents=True)
    (packages / "job_helpers" / "__init__.py").write_text("BONUS = 0.25\n")
    return packages


@pytest.mark.parametrize("isolation", MODES)
def test_python_python3_and_sys_executable_are_the_sandboxes_interpreter(
    isolation: Isolation, job_packages: Path
) -> None:
    settings = SandboxSettings(isolation=isolation, extra_python_paths=[job_packages])
    found = report(run_once(settings, spec("interpreters", INTERPRETERS)))
    child = found.pop("child")
    assert found.pop("on_path").endswith("/bin/python")
    assert len(found) == 4, found
    for name, seen in found.items():
        assert isinstance(seen, dict), f"{name} did not run: {seen}"
        # One interpreter, with the job's packages and without the worker's (pytest here).
        assert seen == {"python": child, "helpers": True, "worker_stack": False}, name


@NEEDS_BWRAP
def test_processes_of_the_code_stay_in_its_sandbox(job_packages: Path) -> None:
    settings = SandboxSettings(isolation="bwrap", extra_python_paths=[job_packages])
    found = report(run_once(settings, spec("confinement", CONFINEMENT)))
    own, child = found["own"], found["child"]
    assert isinstance(child, dict), child
    assert child["uid"] == own["uid"] != 0
    assert child["seccomp"] == "2" and child["no_new_privs"] == "1"
    assert child["cgroup"] == own["cgroup"]  # the tree's cgroup: memory and pids limits
    assert child["nproc"] == own["nproc"] and child["address_space"] == own["address_space"]
    assert max(child["pids"]) < 100  # the sandbox's own pid namespace
    assert child["network"] is False
    assert child["writable_packages"] is False


@needs_layer(shutil.which("bwrap"), "bubblewrap is not installed")
def test_an_interpreter_under_usr_local_is_bound_whole() -> None:
    # python:3.11-slim (the API image) keeps its Python under /usr/local, which the sandbox
    # binds nothing of otherwise: only the system's own Python lives in /usr/bin and /usr/lib.
    settings = SandboxSettings(
        isolation="bwrap", sandbox_uid=61000, python_prefix=Path("/usr/local")
    )
    argv = " ".join(plan_launch(settings).argv)
    assert "--ro-bind /usr/local /opt/python" in argv
    interpreter = f"/opt/python/bin/python3.{sys.version_info.minor}"
    assert f"--symlink {interpreter} /opt/rft/python/bin/python " in argv


@pytest.fixture(scope="module")
def pytest_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """pytest as a job's runtime package, installed the way the worker installs it."""
    return install_runtime_packages(["pytest"], tmp_path_factory.mktemp("job") / "packages")


@pytest.mark.parametrize("isolation", MODES)
def test_a_reward_that_runs_pytest_scores_right_and_wrong_answers(
    isolation: Isolation, pytest_package: Path
) -> None:
    settings = SandboxSettings(isolation=isolation, extra_python_paths=[pytest_package])
    result = run_once(
        settings,
        spec("passes_tests", PASSES_TESTS),
        completions=[RIGHT, WRONG, "def add(a, b) return"],
        examples=[{"tests": TESTS}] * 3,
    )
    assert result.scores == [1.0, 0.0, 0.0], result.logs


def test_without_pytest_the_reward_says_what_to_install() -> None:
    with ProcessSandbox(SandboxSettings(isolation="none")) as sandbox:
        sandbox.load([spec("passes_tests", PASSES_TESTS)])
        result = sandbox.score(
            ScoringBatch(prompts=["p"], completions=[RIGHT], examples=[{"tests": TESTS}])
        )["passes_tests"]
    assert result.scores == [None]
    assert "add it to the job's runtime_packages" in result.errors[0].message
