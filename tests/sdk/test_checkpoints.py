"""Pause, resume, checkpoints and adapter downloads through the SDK, sync and async: pausing
on a job a stand-in worker holds, downloads from a real (short) training job."""

from __future__ import annotations

import asyncio
import io
import json
import os
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import rft
from rft.resources.adapter_archive import archive_name, save_archive
from service.stack import LocalStack
from tests.held_jobs import held_job, let_go
from tests.sdk.conftest import FinishedJob


def adapter_files(directory: Path) -> set[str]:
    return {path.name for path in directory.iterdir()}


def test_pause_and_resume_sync_and_async(stack: LocalStack, api_key: str) -> None:
    """Against a job a stand-in worker holds (tests/held_jobs.py): what each call returns, and
    a second pause refused while the first is in progress. That a real worker checkpoints and
    lets go: tests/integration/test_faults.py."""
    job_id = held_job(api_key)
    with rft.Client(api_key=api_key, base_url=stack.base_url) as client:
        assert client.jobs.pause(job_id).status == rft.JobStatus.PAUSING
        with pytest.raises(rft.ConflictError):
            client.jobs.pause(job_id)
        assert client.jobs.resume(job_id).status == rft.JobStatus.RUNNING  # called off

    async def async_pause_let_go_and_resume() -> tuple[rft.Job, rft.Job, rft.Job]:
        async with rft.AsyncClient(api_key=api_key, base_url=stack.base_url) as client:
            pausing = await client.jobs.pause(job_id)
            await asyncio.to_thread(let_go, job_id)
            paused = await client.jobs.get(job_id)
            return pausing, paused, await client.jobs.resume(job_id)

    pausing, paused, resumed = asyncio.run(async_pause_let_go_and_resume())
    assert pausing.status == rft.JobStatus.PAUSING and paused.status == rft.JobStatus.PAUSED
    assert resumed.status == rft.JobStatus.QUEUED
    with rft.Client(api_key=api_key, base_url=stack.base_url) as client:
        assert client.jobs.cancel(job_id).status == rft.JobStatus.CANCELLED


def test_checkpoints_and_adapters_download_sync_and_async(
    stack: LocalStack, finished_job: FinishedJob, finished_client: rft.Client, tmp_path: Path
) -> None:
    """On the session's finished job (tests/sdk/conftest.py): 2 steps, a checkpoint at each."""
    api_key, job, rft_client = finished_job.api_key, finished_job.job, finished_client
    checkpoints = rft_client.jobs.checkpoints(job.id)
    assert [checkpoint.step for checkpoint in checkpoints.data] == [1, 2]
    assert checkpoints.final_adapter_path is not None

    unpacked = rft_client.jobs.download_checkpoint(job.id, 1, tmp_path / "sync")
    assert unpacked == tmp_path / "sync" / f"{job.id}-step-1"
    assert {"adapter_config.json", "adapter_model.safetensors"} <= adapter_files(unpacked)
    assert json.loads((unpacked / "adapter_config.json").read_text())["peft_type"] == "LORA"
    assert list((tmp_path / "sync").iterdir()) == [unpacked]  # no partial file left behind

    async def async_downloads() -> tuple[rft.CheckpointList, Path, Path]:
        async with rft.AsyncClient(api_key=api_key, base_url=stack.base_url) as client:
            listed = await client.jobs.checkpoints(job.id)
            archive = await client.jobs.download_checkpoint(
                job.id, 2, tmp_path / "async", extract=False
            )
            adapter = await client.jobs.download_adapter(job.id, tmp_path / "final-async")
            return listed, archive, adapter

    listed, archive, async_adapter = asyncio.run(async_downloads())
    assert listed == checkpoints
    assert archive == tmp_path / "async" / f"{job.id}-step-2.tar.gz"
    with tarfile.open(archive) as packed:
        assert f"{job.id}-step-2/adapter_config.json" in packed.getnames()

    # The final adapter, both ways.
    final = rft_client.jobs.download_adapter(job.id, tmp_path / "final")
    assert final.name == f"{job.id}-adapter" and "adapter_config.json" in adapter_files(final)
    assert adapter_files(async_adapter) == adapter_files(final)


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
