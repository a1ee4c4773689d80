"""Pause, resume, checkpoints and adapter downloads through the SDK, sync and async, on a real
training job."""

from __future__ import annotations

import asyncio
import io
import json
import os
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import rft
from rft.resources.adapter_archive import archive_name, save_archive
from service.stack import LocalStack
from tests.sdk.job_inputs import SHOUT_SOURCE
from tests.tiny import TINY_HYPERPARAMETERS

TRAIN_STEPS = 40


def paused_events(client: rft.Client, job_id: str) -> int:
    return sum(event.kind == "paused" for event in client.jobs.events(job_id))


def wait_for_pause_checkpoint(client: rft.Client, job_id: str, pauses_before: int) -> int:
    """The step the worker paused at, once it has saved the checkpoint and let go."""
    deadline = time.monotonic() + 120
    while paused_events(client, job_id) <= pauses_before:
        assert time.monotonic() < deadline, "the worker never confirmed the pause"
        time.sleep(0.2)
    job = client.jobs.get(job_id)
    assert job.status == rft.JobStatus.PAUSED
    return job.steps_completed


def adapter_files(directory: Path) -> set[str]:
    return {path.name for path in directory.iterdir()}


def test_pause_resume_and_download_adapters(
    stack: LocalStack, api_key: str, rft_client: rft.Client, dataset: rft.Dataset, tmp_path: Path
) -> None:
    job = rft_client.jobs.create(
        dataset=dataset,
        reward_functions={"shout": SHOUT_SOURCE},
        hyperparameters={
            **TINY_HYPERPARAMETERS,
            "train_steps": TRAIN_STEPS,
            "checkpoint_every": 100,
        },
    )
    rft_client.jobs.wait(job.id, until_step=2, timeout=300, poll_interval=0.2)

    # Sync pause: pausing while the worker checkpoints the step it is on, then paused.
    assert rft_client.jobs.pause(job.id).status == rft.JobStatus.PAUSING
    with pytest.raises(rft.ConflictError):
        rft_client.jobs.pause(job.id)
    paused_at = wait_for_pause_checkpoint(rft_client, job.id, 0)
    checkpoints = rft_client.jobs.checkpoints(job.id)
    assert paused_at in [checkpoint.step for checkpoint in checkpoints.data]
    assert checkpoints.final_adapter_path is None

    unpacked = rft_client.jobs.download_checkpoint(job.id, paused_at, tmp_path / "sync")
    assert unpacked == tmp_path / "sync" / f"{job.id}-step-{paused_at}"
    assert {"adapter_config.json", "adapter_model.safetensors"} <= adapter_files(unpacked)
    assert json.loads((unpacked / "adapter_config.json").read_text())["peft_type"] == "LORA"
    assert list((tmp_path / "sync").iterdir()) == [unpacked]  # no partial file left behind

    # Sync resume, then the same through the async client.
    assert rft_client.jobs.resume(job.id).status in (rft.JobStatus.QUEUED, rft.JobStatus.RUNNING)
    rft_client.jobs.wait(job.id, until_step=paused_at + 1, timeout=300, poll_interval=0.2)

    async def async_pause_and_download() -> tuple[rft.Job, rft.CheckpointList, Path]:
        async with rft.AsyncClient(api_key=api_key, base_url=stack.base_url) as client:
            paused = await client.jobs.pause(job.id)
            step = await asyncio.to_thread(wait_for_pause_checkpoint, rft_client, job.id, 1)
            listed = await client.jobs.checkpoints(job.id)
            archive = await client.jobs.download_checkpoint(
                job.id, step, tmp_path / "async", extract=False
            )
            return paused, listed, archive

    paused, listed, archive = asyncio.run(async_pause_and_download())
    assert paused.status == rft.JobStatus.PAUSING
    second_pause = max(checkpoint.step for checkpoint in listed.data)
    assert second_pause > paused_at
    assert archive == tmp_path / "async" / f"{job.id}-step-{second_pause}.tar.gz"
    with tarfile.open(archive) as packed:
        assert f"{job.id}-step-{second_pause}/adapter_config.json" in packed.getnames()

    async def async_resume() -> rft.Job:
        async with rft.AsyncClient(api_key=api_key, base_url=stack.base_url) as client:
            return await client.jobs.resume(job.id)

    assert asyncio.run(async_resume()).status != rft.JobStatus.PAUSED
    finished = rft_client.jobs.wait(job.id, timeout=600, poll_interval=0.5)
    assert finished.status == rft.JobStatus.SUCCEEDED, finished.failure_reason

    # The final adapter, both ways.
    assert rft_client.jobs.checkpoints(job.id).final_adapter_path is not None
    final = rft_client.jobs.download_adapter(job.id, tmp_path / "final")
    assert final.name == f"{job.id}-adapter" and "adapter_config.json" in adapter_files(final)

    async def async_adapter() -> Path:
        async with rft.AsyncClient(api_key=api_key, base_url=stack.base_url) as client:
            return await client.jobs.download_adapter(job.id, tmp_path / "final-async")

    assert adapter_files(asyncio.run(async_adapter())) == adapter_files(final)


def test_a_missing_checkpoint_is_a_404_and_leaves_no_file(
    rft_client: rft.Client, idle_job: rft.Job, tmp_path: Path
) -> None:
    with pytest.raises(rft.NotFoundError, match="no checkpoint at step 7"):
        rft_client.jobs.download_checkpoint(idle_job.id, 7, tmp_path)
    with pytest.raises(rft.NotFoundError, match="no final adapter"):
        rft_client.jobs.download_adapter(idle_job.id, tmp_path)
    assert list(tmp_path.iterdir()) == []
    assert rft_client.jobs.checkpoints(idle_job.id).data == []


def _archive(entries: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, content in entries.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            archive.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def test_an_archive_escaping_its_folder_is_refused(tmp_path: Path) -> None:
    packed = _archive({"adapter/adapter_config.json": b"{}", "adapter/../../escaped": b"x"})
    with pytest.raises(rft.RFTError, match="unexpected entry"):
        save_archive(iter([packed[:10], packed[10:]]), tmp_path, "adapter", extract=True)
    assert list(tmp_path.iterdir()) == []
    unpacked = save_archive(
        iter([_archive({"adapter/adapter_config.json": b"{}"})]), tmp_path, "adapter", extract=True
    )
    assert (unpacked / "adapter_config.json").read_bytes() == b"{}"


def test_archive_names_come_from_the_server_but_stay_plain() -> None:
    assert archive_name('attachment; filename="job_1-step-3.tar.gz"', "x") == "job_1-step-3"
    assert archive_name('attachment; filename="../../etc.tar.gz"', "fallback") == "etc"
    assert archive_name('attachment; filename="a b;c"', "fallback") == "fallback"
    assert archive_name(None, "fallback") == "fallback"


def test_an_archive_is_written_to_disk_as_it_arrives(tmp_path: Path) -> None:
    packed = _archive({"adapter/adapter_model.safetensors": os.urandom(1 << 20)})
    chunk = len(packed) // 4

    def body() -> Iterator[bytes]:
        for start in range(0, len(packed), chunk):
            # What came before this chunk is already on disk, not held in memory.
            parts = list(tmp_path.glob(".adapter.*.part"))
            assert len(parts) == 1 and parts[0].stat().st_size >= start - 8192
            yield packed[start : start + chunk]

    archive = save_archive(body(), tmp_path, "adapter", extract=False)
    assert archive.read_bytes() == packed and list(tmp_path.iterdir()) == [archive]
