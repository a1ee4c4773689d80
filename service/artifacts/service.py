"""Checkpoints and adapters: listed from the database, packed as PEFT adapter archives.

Workers write artifacts to RFT_ARTIFACTS_DIR, a volume the API shares (local disk by default).
"""

from __future__ import annotations

import io
import json
import shutil
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path

from sqlalchemy.orm import Session

from service.artifacts.repository import CheckpointRepository
from service.artifacts.schemas import Checkpoint, CheckpointList
from service.artifacts.storage import ADAPTER_FILES, ArtifactStore, fetch_for_reading
from service.errors import NotFound
from service.jobs.service import get_job
from service.jobs.step_repository import StepRepository

# A job that trained every weight (adapter 'full') leaves a whole model instead: these files
# (safetensors, sharded or not) beside the tokenizer's.
WHOLE_MODEL_FILES = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "model.safetensors.index.json",
    "model-*-of-*.safetensors",
)


def list_checkpoints(session: Session, tenant_id: str, job_id: str) -> CheckpointList:
    job = get_job(session, tenant_id, job_id)
    rewards = StepRepository(session).evaluation_rewards(job.id)
    checkpoints = CheckpointRepository(session).list_checkpoints(job.id)
    keep_best = int(job.hyperparameters.get("keep_best", 1))
    best = best_steps([c.step for c in checkpoints], rewards, keep_best)
    return CheckpointList(
        data=[
            Checkpoint(
                step=c.step,
                size_bytes=c.size_bytes,
                created_at=c.created_at,
                download_path=f"/v1/jobs/{job.id}/checkpoints/{c.step}/adapter.tar.gz",
                eval_reward=rewards.get(c.step),
                is_best=c.step in best,
            )
            for c in checkpoints
        ],
        final_adapter_path=f"/v1/jobs/{job.id}/adapter.tar.gz" if job.adapter_path else None,
    )


def best_steps(steps: list[int], rewards: dict[int, float | None], keep_best: int) -> set[int]:
    """The ``keep_best`` steps among ``steps`` with the highest validation reward; of equal
    rewards, the earlier step (it reached that reward first)."""
    evaluated = [step for step in steps if rewards.get(step) is not None]
    ranked = sorted(evaluated, key=lambda step: (-(rewards[step] or 0.0), step))
    return set(ranked[:keep_best])


def base_model_of(session: Session, tenant_id: str, job_id: str) -> str:
    return get_job(session, tenant_id, job_id).base_model


def checkpoint_uri(session: Session, tenant_id: str, job_id: str, step: int) -> str:
    job = get_job(session, tenant_id, job_id)
    checkpoint = CheckpointRepository(session).get_checkpoint(job.id, step)
    if checkpoint is None:
        raise NotFound(f"job {job.id} has no checkpoint at step {step}")
    return checkpoint.path


def final_adapter_uri(session: Session, tenant_id: str, job_id: str) -> str:
    job = get_job(session, tenant_id, job_id)
    if not job.adapter_path:
        raise NotFound(f"job {job.id} has no final adapter (status {job.status})")
    return job.adapter_path


def pack_adapter(store: ArtifactStore, uri: str, archive_name: str, base_model: str) -> Path:
    """A .tar.gz of the adapter files at ``uri`` (or of the whole model, for a job that
    trained every weight), in a temporary file the caller deletes.

    The adapter names ``base_model`` (what the job was given: a hub id, ``rft-tiny``) as its
    base: PEFT wrote the folder the worker loaded, a path that means nothing elsewhere.
    """
    if not store.exists(uri):
        raise NotFound(f"the artifact {archive_name} is no longer in the artifact store")
    handle = tempfile.NamedTemporaryFile(suffix=".tar.gz", delete=False)  # noqa: SIM115
    handle.close()
    with tempfile.TemporaryDirectory() as scratch:
        directory = fetch_for_reading(store, uri, Path(scratch))
        with tarfile.open(handle.name, "w:gz") as archive:
            for path, config in adapter_files(directory, base_model):
                if config is not None:
                    entry = tarfile.TarInfo(f"{archive_name}/{path.name}")
                    entry.size = len(config)
                    entry.mtime = int(path.stat().st_mtime)
                    entry.mode = 0o644
                    archive.addfile(entry, io.BytesIO(config))
                else:
                    archive.add(path, arcname=f"{archive_name}/{path.name}")
    return Path(handle.name)


def adapter_files(directory: Path, base_model: str) -> Iterator[tuple[Path, bytes | None]]:
    """The adapter's files in ``directory`` (``ADAPTER_FILES``; a whole model's,
    ``WHOLE_MODEL_FILES``, for a job that trained every weight), each with the content to ship
    instead of the file's own where it differs: the config names ``base_model``."""
    whole_model = sorted(
        {path.name for pattern in WHOLE_MODEL_FILES for path in directory.glob(pattern)}
    )
    for name in (*ADAPTER_FILES, *whole_model):
        path = directory / name
        if path.is_file():
            config = named_base_model(path, base_model) if name == "adapter_config.json" else None
            yield path, config


def copy_adapter(directory: Path, destination: Path, base_model: str) -> Path:
    """The adapter in ``directory`` as a folder of its own, as ``pack_adapter`` packs it."""
    destination.mkdir(parents=True, exist_ok=True)
    for path, config in adapter_files(directory, base_model):
        if config is not None:
            (destination / path.name).write_bytes(config)
        else:
            shutil.copyfile(path, destination / path.name)
    return destination


def named_base_model(adapter_config: Path, base_model: str) -> bytes:
    """The adapter's config with ``base_model_name_or_path`` set to what the user gave."""
    config = json.loads(adapter_config.read_text())
    config["base_model_name_or_path"] = base_model
    return json.dumps(config, indent=2, sort_keys=True).encode()
