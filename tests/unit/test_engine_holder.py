"""The worker's side of a kept vLLM engine (workers.training.launch): which job goes to the
process that keeps one, and that every other job stops it first. A stand-in process (``cat``
copying its stdin to a file) holds the engine here; the real one is in
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
def holder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[subprocess.Popen[bytes]]:
    process = holder_process(tmp_path / "received")
    monkeypatch.setattr(launch, "_engine_holder", launch._EngineHolder(process, "org/model"))
    yield process
    launch.stop_process_group(process, grace_s=1)


def test_a_grpo_job_on_the_same_base_model_goes_to_the_holder(
    holder: subprocess.Popen[bytes], tmp_path: Path
) -> None:
    assert launch._send_to_engine_holder(tmp_path / "job-2", job()) is holder
    assert launch._engine_holder is None  # it is the job's process now
    assert holder.stdin is not None
    holder.stdin.close()  # cat writes what it got and ends
    holder.wait(timeout=10)
    assert (tmp_path / "received").read_text() == f'{{"job_dir": "{tmp_path / "job-2"}"}}\n'


@pytest.mark.parametrize(
    "other", [job(base_model="org/other"), job(method="sft")], ids=["other-model", "sft"]
)
def test_any_other_job_stops_the_holder_first(
    holder: subprocess.Popen[bytes], tmp_path: Path, other: Any
) -> None:
    assert launch._send_to_engine_holder(tmp_path / "job-2", other) is None
    assert holder.poll() is not None, "the holder still runs (and holds its memory)"
    assert launch._engine_holder is None
    assert (tmp_path / "received").read_text() == ""


def test_a_holder_that_died_between_jobs_is_passed_over(
    holder: subprocess.Popen[bytes], tmp_path: Path
) -> None:
    holder.kill()
    holder.wait()
    assert launch._send_to_engine_holder(tmp_path / "job-2", job()) is None
    assert launch._engine_holder is None


def test_a_new_launch_and_the_workers_shutdown_stop_the_holder(
    holder: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(launch, "_spare", None)
    launch.stop_spare()
    assert holder.poll() is not None and launch._engine_holder is None
