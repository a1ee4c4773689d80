"""The worker's side of a kept vLLM engine (workers.training.launch.WarmProcesses): which job
goes to the process that keeps one, and that every other job stops it first. A stand-in
process (``cat`` copying its stdin to a file) holds the engine here; the real one is in
tests/vllm_generation/test_vllm_engine_reuse.py."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from workers.training import launch


def holder_process(received: Path) -> subprocess.Popen[bytes]:
    with received.open("wb") as sink:
        return subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=sink, process_group=0)


def job(method: str = "grpo", base_model: str = "org/model") -> Any:
    return SimpleNamespace(spec=SimpleNamespace(method=method, base_model=base_model))


@pytest.fixture
def warm() -> launch.WarmProcesses:
    return launch.WarmProcesses()


@pytest.fixture
def holder(tmp_path: Path, warm: launch.WarmProcesses) -> Iterator[subprocess.Popen[bytes]]:
    process = holder_process(tmp_path / "received")
    # As the worker's main thread keeps it after the job whose engine it kept.
    warm.keep_engine_holder(process, "org/model")
    yield process
    launch.stop_process_group(process, grace_s=1)


def test_a_grpo_job_on_the_same_base_model_goes_to_the_holder(
    holder: subprocess.Popen[bytes], tmp_path: Path, warm: launch.WarmProcesses
) -> None:
    assert warm.send_to_engine_holder(tmp_path / "job-2", job()) is holder
    assert warm.send_to_engine_holder(tmp_path / "job-3", job()) is None  # the job's now
    assert holder.stdin is not None
    holder.stdin.close()  # cat writes what it got and ends
    holder.wait(timeout=10)
    assert (tmp_path / "received").read_text() == f'{{"job_dir": "{tmp_path / "job-2"}"}}\n'


@pytest.mark.parametrize(
    "other", [job(base_model="org/other"), job(method="sft")], ids=["other-model", "sft"]
)
def test_any_other_job_stops_the_holder_first(
    holder: subprocess.Popen[bytes], tmp_path: Path, other: Any, warm: launch.WarmProcesses
) -> None:
    assert warm.send_to_engine_holder(tmp_path / "job-2", other) is None
    assert holder.poll() is not None, "the holder still runs (and holds its memory)"
    assert (tmp_path / "received").read_text() == ""


def test_a_holder_that_died_between_jobs_is_passed_over(
    holder: subprocess.Popen[bytes], tmp_path: Path, warm: launch.WarmProcesses
) -> None:
    holder.kill()
    holder.wait()
    assert warm.send_to_engine_holder(tmp_path / "job-2", job()) is None


def test_a_new_launch_and_the_workers_shutdown_stop_the_holder(
    holder: subprocess.Popen[bytes], warm: launch.WarmProcesses
) -> None:
    warm.stop()
    assert holder.poll() is not None
    assert warm.send_to_engine_holder(Path("job-2"), job()) is None  # none is held any more
