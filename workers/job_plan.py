"""What a job's training needs, read from the database once, before any process starts: the
TrainingSpec (dataset, validation rows, config, hyperparameters, resume checkpoint,
generation backend), what the ranks' sandboxes need (network, packages, secrets) and the
job's guards (workers.guards)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy.orm import Session

from sandbox.runtime_packages import install_runtime_packages
from service.artifacts.storage import ArtifactStore
from service.datasets.repository import DatasetRepository
from service.jobs.guard_settings import GuardSettings
from service.jobs.hyperparameters import Hyperparameters
from service.jobs.lineage import INITIAL_ADAPTER
from service.jobs.repository import JobRepository
from service.jobs.schemas import InitFrom
from service.jobs.service import split_validation
from service.models import Checkpoint, Job
from service.secrets import unseal
from service.settings import Settings
from workers.database_observer import load_reward_config
from workers.failures import StartingWeightsMissing
from workers.training.generation import choose_generation
from workers.training.rank_process import RankJob

if TYPE_CHECKING:
    from workers.training.spec import TrainingSpec

logger = logging.getLogger(__name__)


@dataclass
class JobPlan:
    spec: TrainingSpec
    allow_network: bool
    runtime_packages: list[str]
    num_devices: int = 1
    engine: str = "ddp"
    guards: GuardSettings = field(default_factory=GuardSettings)
    # Guards that paused this job before (a resumed run): they warn, but pause it no more.
    guards_that_paused: frozenset[str] = frozenset()
    # The hosts of its HTTP tools and endpoint grader (service.http_tools).
    egress_hosts: list[str] = field(default_factory=list)


def plan_job(
    session: Session,
    job_id: str,
    settings: Settings,
    store: ArtifactStore,
    resume_from: Checkpoint | None,
) -> JobPlan:
    from workers.training.spec import TrainingSpec

    job = JobRepository(session).get_any_tenant(job_id)
    assert job is not None
    dataset, validation = _training_and_validation_rows(session, job)
    output_dir = settings.resolved_artifacts_dir / job_id
    spec = TrainingSpec(
        base_model=job.base_model,
        method=job.method,
        dataset=dataset,
        validation=validation,
        reward_config=load_reward_config(
            session, job_id, job.config_version, unseal(job.secrets_sealed, settings)
        ),
        hyperparameters=Hyperparameters.from_stored(job.hyperparameters),
        output_dir=output_dir,
        model_cache_dir=settings.resolved_model_cache_dir,
        resume_from_checkpoint=_usable(resume_from, store, output_dir),
        # On a resume too: the model is built as at the start, then the checkpoint loads.
        init_adapter=_starting_weights(job, store, output_dir),
        init_optimizer=job.init_from_optimizer,
        # Settings this machine cannot honour fail the job here, before any work.
        generation=choose_generation(settings),
    )
    return JobPlan(
        spec,
        job.allow_network,
        list(job.runtime_packages or []),
        job.num_devices,
        job.engine,
        GuardSettings.from_stored(job.guards),
        frozenset(
            str(w["kind"]) for w in job.warnings or [] if w.get("guard") and w.get("paused_job")
        ),
        list(job.egress_hosts or []),
    )


def rank_job(plan: JobPlan) -> RankJob:
    """What the training processes need; runtime packages are installed here, once."""
    packages = (
        install_runtime_packages(plan.runtime_packages, plan.spec.output_dir / "runtime-packages")
        if plan.runtime_packages
        else None
    )
    return RankJob(
        spec=plan.spec,
        allow_network=plan.allow_network,
        egress_hosts=plan.egress_hosts,
        packages_path=packages,
        report_to=list(plan.spec.hyperparameters.report_to),
    )


def _training_and_validation_rows(
    session: Session, job: Job
) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    rows = DatasetRepository(session).rows(job.dataset_id)
    if job.validation_dataset_id is not None:
        # Only the rows an evaluation reads.
        limit = int(job.hyperparameters.get("eval_max_prompts", 64))
        return rows, DatasetRepository(session).rows(job.validation_dataset_id, limit=limit)
    if job.validation_split is not None:
        return split_validation(rows, job.validation_split)
    return rows, None


def _starting_weights(job: Job, store: ArtifactStore, output_dir: Path) -> Path | None:
    """The job's own copy of its init_from weights as a local folder (fetched from S3)."""
    if job.init_adapter_path is None:
        return None
    if not store.exists(job.init_adapter_path):
        assert job.parent_job_id is not None  # stored with the copy, at creation
        start = InitFrom(job.parent_job_id, job.parent_checkpoint_step)
        raise StartingWeightsMissing(
            f"this job's copy of its starting weights (init_from {str(start)!r}) is no "
            "longer in the artifact store"
        )
    return store.fetch_directory(job.init_adapter_path, output_dir / INITIAL_ADAPTER)


def _usable(checkpoint: Checkpoint | None, store: ArtifactStore, output_dir: Path) -> Path | None:
    """A local folder to resume from: the checkpoint itself, or a copy fetched from the store
    when this worker is not the machine that wrote it."""
    if checkpoint is None:
        return None
    local = output_dir / f"checkpoint-{checkpoint.step}"
    if Path(checkpoint.path) != local.resolve() and store.exists(checkpoint.path):
        local = store.fetch_directory(checkpoint.path, local)
    if not (local / "trainer_state.json").exists():
        logger.warning("checkpoint %s is missing; starting from the base model", checkpoint.path)
        return None
    return local
