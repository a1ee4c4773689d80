"""scripts/gpu_check.sh, the one command for a GPU machine: its plan (--dry-run), which runs
nothing, names every part in order, the GPU environment's extras and pins, and the budget; and
the commands its GPU path runs, with what makes a skip there a failure."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu_check.sh"


def plan(tmp_path: Path, **env: str) -> list[str]:
    result = subprocess.run(
        ["bash", str(SCRIPT), "--dry-run"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "OUT": str(tmp_path), **env},
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert list(tmp_path.iterdir()) == []  # a dry run writes nothing, not even the report
    return result.stdout.splitlines()


def test_the_plan_runs_the_parts_in_order_within_40_minutes(tmp_path: Path) -> None:
    lines = plan(tmp_path)
    report = tmp_path / "gpu-report.md"
    assert lines[0] == f"gpu_check plan: budget 2400 s on this machine's GPUs; report: {report}"
    steps = [line for line in lines if re.match(r"\d\. ", line)]
    assert [step.split(" [")[0] for step in steps] == [
        "1. setup",
        "2. tests/gpu",
        "3. tests/vllm_generation",
        "4. bench",
    ]
    caps = [int(cap) for cap in re.findall(r"\[cap (\d+) s\]", "\n".join(steps))]
    assert sum(caps) <= 2400 and len(caps) == 3  # the bench gets what is left
    assert re.search(
        r"RFT_REQUIRE_VLLM=1 RFT_REQUIRE_GPUS=\d+ pytest tests/vllm_generation", steps[2]
    )
    assert re.search(r"RFT_REQUIRE_GPUS=\d+ pytest tests/gpu", steps[1])
    assert steps[3].endswith("python bench/bench_gpu_vllm.py")
    # Without a GPU the plan says what runs instead.
    if shutil.which("nvidia-smi") is None:
        assert lines[-1].startswith("CUDA here: absent: only the CPU checks run")
    else:
        assert lines[-1].startswith("CUDA here: ")


def test_the_gpu_environment_installs_the_projects_extras_at_its_pins(tmp_path: Path) -> None:
    (setup,) = [line for line in plan(tmp_path) if line.startswith("1. setup")]
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    installed = re.search(r"pip install -e \.\[([a-z,-]+)\]", setup)
    assert installed is not None, setup
    assert set(installed.group(1).split(",")) == {
        "api",
        "worker",
        "embedded",
        "dev",
        "vllm",
        "qlora",
    }
    assert set(installed.group(1).split(",")) <= set(extras)
    # torch first, at the main environment's pin (scripts/setup.sh), here PyPI's CUDA build.
    torch_pin = re.search(r'pip_install "(torch==[\d.]+)"', (ROOT / "scripts/setup.sh").read_text())
    assert torch_pin is not None
    assert setup.index(f"pip install {torch_pin.group(1)}") < setup.index("pip install -e .[")
    vllm = re.search(r"vllm==([\d.]+)", setup)
    (allowed,) = extras["vllm"]
    low, high = re.findall(r"[\d.]+", allowed)
    as_tuple = lambda v: tuple(int(part) for part in v.split("."))  # noqa: E731
    assert vllm is not None and as_tuple(low) <= as_tuple(vllm.group(1)) < as_tuple(high)
    assert "transformers==5.23.0" in setup and "trl==1.16.0" in setup


def test_a_wheelhouse_or_a_ready_interpreter_is_named_in_the_plan(tmp_path: Path) -> None:
    (offline,) = [
        line for line in plan(tmp_path, RFT_GPU_WHEELHOUSE="/wheels") if line.startswith("1. setup")
    ]
    assert offline.endswith("(offline, from /wheels)")
    (ready,) = [
        line
        for line in plan(tmp_path, RFT_GPU_PYTHON="/opt/env/bin/python")
        if line.startswith("1. setup")
    ]
    assert "none: RFT_GPU_PYTHON=/opt/env/bin/python as it is" in ready


# -- the commands a GPU run runs -------------------------------------------------------------
# The real run path, on this machine: a stub nvidia-smi lists one GPU, and a stub interpreter
# (the GPU environment's python) records each command and the variables that decide whether a
# skip is a failure, instead of running it.

STUB_PYTHON = """#!{python}
import json, os, sys
with open(os.environ["STUB_RECORD"], "a") as record:
    wanted = ("RFT_REQUIRE_GPUS", "RFT_REQUIRE_VLLM", "RFT_REQUIRE_ALL_LAYERS")
    env = {{name: os.environ[name] for name in wanted if name in os.environ}}
    record.write(json.dumps({{"argv": sys.argv[1:], "env": env}}) + "\\n")
code = sys.argv[2] if sys.argv[1:2] == ["-c"] else ""
sys.exit(1 if "import vllm" in code and os.environ.get("STUB_WITHOUT_VLLM") else 0)
"""
STUB_NVIDIA_SMI = """#!/bin/sh
[ "$1" = -L ] && echo "GPU 0: NVIDIA H200 (UUID: GPU-0)" || echo "NVIDIA H200, 143771 MiB, 580"
"""


def gpu_run(tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess[str], list[Any]]:
    stubs, venv, out = tmp_path / "bin", tmp_path / "venv", tmp_path / "out"
    for folder in (stubs, venv / "bin", out):
        folder.mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text(STUB_PYTHON.format(python=sys.executable))
    (stubs / "nvidia-smi").write_text(STUB_NVIDIA_SMI)
    for stub in (python, stubs / "nvidia-smi"):
        stub.chmod(0o755)
    record = tmp_path / "commands.jsonl"
    result = subprocess.run(
        ["bash", str(SCRIPT)],
        capture_output=True,
        text=True,
        timeout=120,
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("RFT_")},
            "PATH": f"{stubs}:{os.environ['PATH']}",
            "OUT": str(out),
            "RFT_GPU_VENV": str(venv),
            "STUB_RECORD": str(record),
            **env,
        },
        check=False,
    )
    commands = [json.loads(line) for line in record.read_text().splitlines()]
    return result, commands


def run_of(commands: list[Any], *tail: str) -> Any:
    (found,) = [c for c in commands if c["argv"][-len(tail) :] == list(tail)]
    return found


def test_a_gpu_run_requires_what_its_parts_need(tmp_path: Path) -> None:
    result, commands = gpu_run(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    installs = [c["argv"] for c in commands if c["argv"][:3] == ["-m", "pip", "install"]]
    # torch alone first (PyPI's CUDA build), then the project with QLoRA's bitsandbytes.
    assert installs[1][-1] == "torch==2.13.0"
    (project,) = [
        argv for argv in installs if "-e" in argv and argv[argv.index("-e") + 1] != "./sdk[cli]"
    ]
    assert project[project.index("-e") + 1] == ".[api,worker,embedded,dev,vllm,qlora]"
    # Every test part: a skip of a test this one GPU fits fails it (tests/layers.py).
    gpu_tests = run_of(commands, "tests/gpu")
    assert gpu_tests["argv"][:2] == ["-m", "pytest"] and gpu_tests["env"] == {
        "RFT_REQUIRE_GPUS": "1"
    }
    vllm_tests = run_of(commands, "tests/vllm_generation")
    assert vllm_tests["env"] == {"RFT_REQUIRE_GPUS": "1", "RFT_REQUIRE_VLLM": "1"}
    assert run_of(commands, "bench/bench_gpu_vllm.py")
    assert "Every part passed." in (tmp_path / "out" / "gpu-report.md").read_text()


def test_a_gpu_run_without_vllm_fails_saying_not_run(tmp_path: Path) -> None:
    result, commands = gpu_run(tmp_path / "missing", STUB_WITHOUT_VLLM="1")
    assert result.returncode == 1
    assert not [c for c in commands if "tests/vllm_generation" in c["argv"]]
    report = (tmp_path / "missing" / "out" / "gpu-report.md").read_text()
    assert "| tests-vllm | NOT RUN, a failure: vLLM is not installed" in report
    assert "Every part passed" not in report
    # Said to be unwanted: still NOT RUN in the verdict, but no failure.
    result, _ = gpu_run(tmp_path / "unwanted", STUB_WITHOUT_VLLM="1", RFT_GPU_WITHOUT_VLLM="1")
    assert result.returncode == 0, result.stdout + result.stderr
    report = (tmp_path / "unwanted" / "out" / "gpu-report.md").read_text()
    assert "Every part that ran passed; NOT RUN: tests-vllm." in report


def test_the_overlay_brings_what_qlora_needs() -> None:
    """A torch-only GPU image gets bitsandbytes with the overlay: without it the QLoRA test
    would fail there (RFT_REQUIRE_GPUS), as it once silently skipped."""
    requirements = (ROOT / "scripts" / "gpu_overlay_requirements.txt").read_text().split()
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    (qlora,) = extras["qlora"]
    assert qlora.startswith("bitsandbytes")
    assert [r for r in requirements if r.startswith("bitsandbytes==")]
