"""init_from: a job that starts from another job's LoRA weights (its final adapter or one of
its checkpoints), and the copy of those weights the new job keeps as its own.

The parent is checked at creation (the tenant's, same base model, the same LoRA shape, the
weights still stored) and its files are copied into the new job's artifact area then, so the
new job never reads the parent's artifacts again: the parent may be deleted. docs/lineage.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from service.artifacts.repository import CheckpointRepository
from service.artifacts.storage import ADAPTER_FILES, OPTIMIZER_FILE, ArtifactStore
from service.errors import BadRequest, NotFound
from service.jobs.hyperparameters import Hyperparameters
from service.jobs.repository import JobRepository
from service.jobs.schemas import InitFrom, JobCreate
from service.jobs.status import JobStatus
from service.models import Job

# Where a job keeps its copy of the starting weights, under its own key in the artifact store
# (and, fetched from S3, in its output folder on the worker).
INITIAL_ADAPTER = "initial-adapter"
# What makes an adapter: an adapter only fits a model of this shape. Taken from the parent
# unless the request sets them; lora_dropout (training only) is the new job's own.
LORA_SHAPE = ("lora_rank", "lora_alpha", "lora_target_modules")


@dataclass(frozen=True)
class StartingWeights:
    """The parent's files the new job starts from: where they are, and which to copy."""

    start: InitFrom
    uri: str
    files: tuple[str, ...]


def resolve_init_from(
    session: Session, tenant_id: str, payload: JobCreate, store: ArtifactStore
) -> tuple[JobCreate, StartingWeights | None]:
    """The request with what it takes from its parent (base model, LoRA shape) filled in, and
    the weights to copy; 404 for a job that is not the tenant's, 400 for anything that does
    not fit."""
    start = payload.starting_point
    if start is None:
        return payload, None
    parent = JobRepository(session).get(tenant_id, start.job_id)
    if parent is None:
        # Another tenant's job reads exactly like a missing one.
        raise NotFound(f"init_from: job {start.job_id!r} not found")
    if (
        payload.hyperparameters.adapter == "full"
        or (parent.hyperparameters or {}).get("adapter") == "full"
    ):
        raise BadRequest(
            f"init_from {str(start)!r}: continuing is for LoRA adapters, and "
            + (
                "this job trains every weight (adapter 'full')"
                if payload.hyperparameters.adapter == "full"
                else f"job {parent.id!r} trained every weight (adapter 'full'), not an adapter"
            )
        )
    payload = _inherit(payload, parent)
    uri = _stored_weights(session, parent, start)
    present = store.top_level_files(uri) if store.exists(uri) else set()
    files = [name for name in ADAPTER_FILES if name in present]
    if "adapter_config.json" not in files:
        raise BadRequest(
            f"init_from {str(start)!r}: its adapter is no longer in the artifact store"
        )
    if payload.init_from_optimizer:
        if OPTIMIZER_FILE not in present:
            raise BadRequest(
                f"init_from_optimizer: checkpoint {start.checkpoint_step} of job {parent.id!r} "
                f"keeps no {OPTIMIZER_FILE} (the job trained with engine {parent.engine!r}; "
                "only 'ddp' checkpoints keep the optimizer state whole): leave "
                "init_from_optimizer out to start the optimizer fresh"
            )
        files.append(OPTIMIZER_FILE)
    return payload, StartingWeights(start, uri, tuple(files))


def pin_starting_weights(store: ArtifactStore, weights: StartingWeights, job_id: str) -> str:
    """Copy the starting weights to ``job_id``'s own artifact area; returns the copy's URI."""
    return store.copy_files(weights.uri, weights.files, f"{job_id}/{INITIAL_ADAPTER}")


def _inherit(payload: JobCreate, parent: Job) -> JobCreate:
    """Base model and LoRA shape: the parent's where the request leaves them out, else equal."""
    base_model = payload.base_model
    if "base_model" not in payload.model_fields_set:
        base_model = parent.base_model
    elif base_model != parent.base_model:
        raise BadRequest(
            f"init_from: job {parent.id!r} trained an adapter for base model "
            f"{parent.base_model!r}, and this job asks for {base_model!r}: an adapter fits "
            "only its own base model (leave base_model out to take the parent's)"
        )
    theirs = Hyperparameters.from_stored(parent.hyperparameters)
    ours = payload.hyperparameters
    inherited: dict[str, Any] = {}
    differences: list[str] = []
    for name in LORA_SHAPE:
        asked, trained = getattr(ours, name), getattr(theirs, name)
        if name not in ours.model_fields_set:
            inherited[name] = trained
        elif not _same_value(asked, trained):
            differences.append(f"{name} {asked!r} (the parent's: {trained!r})")
    if differences:
        raise BadRequest(
            f"init_from: this job's LoRA shape differs from job {parent.id!r}'s adapter: "
            f"{', '.join(differences)}; leave them out to take the parent's, or set them equal"
        )
    return payload.model_copy(
        update={"base_model": base_model, "hyperparameters": ours.model_copy(update=inherited)}
    )


def _same_value(ours: Any, theirs: Any) -> bool:
    # Target modules name a set of layers: their order does not change the adapter.
    if isinstance(ours, list) and isinstance(theirs, list):
        return sorted(ours) == sorted(theirs)
    return bool(ours == theirs)


def _stored_weights(session: Session, parent: Job, start: InitFrom) -> str:
    """The URI of the parent's final adapter or named checkpoint; 400 when it has none."""
    checkpoints = CheckpointRepository(session)
    if start.checkpoint_step is None:
        if parent.adapter_path:
            return parent.adapter_path
        ended = JobStatus(parent.status).is_terminal
        raise BadRequest(
            f"init_from: job {parent.id!r} is {parent.status} and has no final adapter"
            f"{'' if ended else ' yet (it has one once it succeeds)'}; "
            f"{_checkpoints_hint(checkpoints, parent.id)}"
        )
    checkpoint = checkpoints.get_checkpoint(parent.id, start.checkpoint_step)
    if checkpoint is None:
        raise BadRequest(
            f"init_from: job {parent.id!r} has no checkpoint at step {start.checkpoint_step}; "
            f"{_checkpoints_hint(checkpoints, parent.id)}"
        )
    return checkpoint.path


def _checkpoints_hint(checkpoints: CheckpointRepository, job_id: str) -> str:
    steps = [checkpoint.step for checkpoint in checkpoints.list_checkpoints(job_id)]
    if not steps:
        return "it has no checkpoints either"
    listed = ", ".join(map(str, steps))
    return f"its checkpoints are at steps {listed} (e.g. '{job_id}:checkpoint-{steps[-1]}')"
