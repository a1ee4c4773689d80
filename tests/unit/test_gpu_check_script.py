"""scripts/gpu_check.sh, the one command for a GPU machine: its plan (--dry-run), which runs
nothing, names every part in order, the GPU environment's extras and pins, and the budget."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

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
    assert "RFT_REQUIRE_VLLM=1 pytest tests/vllm_generation" in steps[2]
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
    assert set(installed.group(1).split(",")) == {"api", "worker", "embedded", "dev", "vllm"}
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
