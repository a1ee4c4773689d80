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
    torch_pin = re.search(
        r'pip_with "\$1" "(torch==[\d.]+)"', (ROOT / "scripts/setup.sh").read_text()
    )
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
        ["bash", str(SCRIPT), *env.pop("GPU_RUN_ARGS", "").split()],
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


# -- one 15-minute window with vLLM in it ----------------------------------------------------
# scripts/gpu_parts.sh packs vLLM, the overlay and the project into parts; the check's window
# unpacks them with the same function the parts' unpack.sh holds, then runs its capped parts.

PARTS = ROOT / "scripts" / "gpu_parts.sh"


def parts_section(name: str) -> list[str]:
    """One section of scripts/gpu_vllm_parts.txt, read as the scripts read it."""
    result = subprocess.run(
        ["bash", "-c", f'. "{PARTS}" && parts_section "$1"', "parts_section", name],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return result.stdout.splitlines()


def test_the_part_list_names_vllm_0_26_its_wheels_trims_and_engine_modules() -> None:
    # The release pinning the GPU image's torch 2.11.0, inside the `vllm` extra's range.
    assert parts_section("vllm") == ["vllm==0.26.0"]
    (allowed,) = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]["vllm"]
    low, high = re.findall(r"[\d.]+", allowed)
    as_tuple = lambda v: tuple(int(part) for part in v.split("."))  # noqa: E731
    assert as_tuple(low) <= (0, 26, 0) < as_tuple(high)
    wheels = parts_section("wheels")
    assert {"msgspec", "pyzmq", "cbor2", "openai>=2,<3", "compressed-tensors==0.17.0"} <= set(
        wheels
    )
    assert not [w for w in wheels if w.split("=")[0].split(">")[0] in {"torch", "vllm"}]
    assert "vllm_flash_attn/_vllm_fa2_C.abi3.so" in parts_section("trim")
    modules = parts_section("modules")
    assert "vllm.v1.engine.core" in modules and "trl.generation.vllm_generation" in modules
    assert all(re.fullmatch(r"[a-z_][a-z0-9_.]*", module) for module in modules)


def test_the_window_plan_fits_ten_minutes_with_every_part_capped(tmp_path: Path) -> None:
    result = subprocess.run(
        ["bash", str(SCRIPT), "--window", "--dry-run", "--unpack-parts", "/parts"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "OUT": str(tmp_path)},
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert list(tmp_path.iterdir()) == []
    lines = result.stdout.splitlines()
    budget = int(re.findall(r"budget (\d+) s", lines[0])[0])
    assert budget < 600
    steps = [line for line in lines if re.match(r"\d\. ", line)]
    assert [step.split(" [")[0] for step in steps] == [
        "1. unpack",
        "2. probe",
        "3. vllm-job",
        "4. vllm-sleep",
        "5. bench",
    ]
    caps = [int(cap) for cap in re.findall(r"\[cap (\d+) s\]", "\n".join(steps))]
    assert len(caps) == 4 and sum(caps) + 60 <= budget  # the bench gets at least a minute
    # The two tests named there exist.
    for step in steps[2:4]:
        node = step.split("pytest ")[1]
        path, name = node.split("::")
        assert f"def {name}(" in (ROOT / path).read_text()


def tiny_wheel(folder: Path) -> None:
    import zipfile

    with zipfile.ZipFile(folder / "tinyovl-1.0-py3-none-any.whl", "w") as wheel:
        wheel.writestr("tinyovl/__init__.py", "")
        info = "tinyovl-1.0.dist-info"
        wheel.writestr(f"{info}/METADATA", "Metadata-Version: 2.1\nName: tinyovl\nVersion: 1.0\n")
        wheel.writestr(
            f"{info}/WHEEL",
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        wheel.writestr(f"{info}/RECORD", "")


def fake_parts(tmp_path: Path) -> Path:
    """Parts laid out as pack_parts lays them: payload/{project.tar.gz,vsite.tar.xz,ovl/}."""
    import tarfile

    payload, vsite = tmp_path / "build" / "payload", tmp_path / "build" / "vsite"
    (payload / "ovl").mkdir(parents=True)
    (vsite / "vllm").mkdir(parents=True)
    (vsite / "vllm" / "__init__.py").write_text("__version__ = '0.26.0'\n")
    tiny_wheel(payload / "ovl")
    with tarfile.open(payload / "vsite.tar.xz", "w:xz") as tar:
        tar.add(vsite, arcname=".")
    with tarfile.open(payload / "project.tar.gz", "w:gz") as tar:
        tar.add(ROOT / "pyproject.toml", arcname="pyproject.toml")
    with tarfile.open(tmp_path / "bundle.tar", "w") as tar:
        tar.add(payload, arcname="payload")
    bundle, parts = (tmp_path / "bundle.tar").read_bytes(), tmp_path / "parts"
    parts.mkdir()
    half = len(bundle) // 2
    (parts / "part-00").write_bytes(bundle[:half])
    (parts / "part-01").write_bytes(bundle[half:])
    return parts


def tree(folder: Path) -> list[str]:
    return sorted(
        str(p.relative_to(folder)) for p in folder.rglob("*") if "__pycache__" not in p.parts
    )


def test_a_window_unpacks_the_parts_as_their_unpack_script_does_then_runs_its_parts(
    tmp_path: Path,
) -> None:
    parts = fake_parts(tmp_path)
    dest = tmp_path / "dest"
    result, commands = gpu_run(
        tmp_path / "run",
        RFT_GPU_PYTHON=str(tmp_path / "run" / "venv" / "bin" / "python"),
        RFT_GPU_UNPACK_DEST=str(dest),
        GPU_RUN_ARGS=f"--unpack-parts {parts}",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert (dest / "rft" / "pyproject.toml").is_file()
    assert (dest / "vsite" / "vllm" / "__init__.py").is_file()
    assert (dest / "ovl" / "tinyovl" / "__init__.py").is_file()
    assert f'export PYTHONPATH="{dest}/vsite:{dest}/ovl:' in (dest / "rft-env.sh").read_text()
    # The parts' own unpack.sh (for a machine without the project) gives the same tree.
    script, again = tmp_path / "unpack.sh", tmp_path / "again"
    subprocess.run(
        ["bash", "-c", f'. "{PARTS}" && write_unpack_script "$1"', "w", str(script)],
        cwd=ROOT,
        check=True,
        timeout=30,
    )
    subprocess.run(["bash", str(script), str(parts), str(again)], check=True, timeout=120)
    assert tree(again) == tree(dest) != []
    # Then each part, in order: the probe imports the part list's engine modules.
    probe, job, sleep, bench = commands
    assert probe["argv"][0] == "-c" and probe["argv"][2:] == parts_section("modules")
    assert job["argv"][-1].endswith("::test_a_job_trains_end_to_end_with_vllm_generating")
    assert sleep["argv"][-1].startswith("tests/vllm_generation/test_vllm_engine_reuse.py::")
    for test in (job, sleep):
        assert test["env"] == {"RFT_REQUIRE_GPUS": "1", "RFT_REQUIRE_VLLM": "1"}
    assert bench["argv"][:2] == ["bench/bench_gpu_vllm.py", "--steps"]
    report = (tmp_path / "run" / "out" / "gpu-report.md").read_text()
    for name in ("unpack", "probe", "vllm-job", "vllm-sleep", "bench"):
        assert f"| {name} | ok" in report
    assert "window, CUDA: 1 GPU(s). Every part passed." in report
