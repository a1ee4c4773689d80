"""Runs one job from its id: the plain function behind the Celery task, testable without Celery."""

from __future__ import annotations

import functools
import json
import logging
import os
import socket
import traceback
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from sqlalchemy import select, text, update
from sqlalchemy.orm import Session

from sandbox.api import RewardFunctionSpec
from service.artifacts.storage import ArtifactStore, artifact_store
from service.datasets.repository import DatasetRepository
from service.db import session_scope
from service.jobs.hyperparameters import Hyperparameters
from service.jobs.repository import JobRepository
from service.jobs.schemas import run_settings
from service.jobs.service import split_validation, transition
from service.jobs.status import JobStatus
from service.models import Checkpoint, Job, Step
from service.secrets import SecretsKeyError, unseal
from service.settings import Settings, get_settings
from workers.circuit_breaker import RewardCircuitBreaker
from workers.job_watch import JobState, JobWatcher
from workers.lease import JobHeartbeat
from workers.metrics import observe_step
from workers.placement import FAILED, FINISHED, NodeRun, placed
from workers.recording import BackgroundWriter, store_step, with_database_retries
from workers.runtime_packages import PackageInstallError, install_runtime_packages
from workers.training.generation import GenerationSetupError, choose_generation
from workers.training.launch import (
    EnvironmentRecorder,
    NodeLost,
    StagesEnvironment,
    TrainingProcessError,
    run_grpo_in_processes,
    run_node_processes,
)
from workers.training.rank_process import RankJob
from workers.training.records import RewardConfig, StepRecord
from workers.training.trackers import (
    TrackerSetupError,
    check_trackers_installed,
)
from workers.training_signals import (
    SignalMonitor,
    SignalSettings,
    TrainingWarning,
    no_signal_run_warning,
)

if TYPE_CHECKING:
    from workers.training.spec import TrainingOutcome, TrainingSpec

logger = logging.getLogger(__name__)

LEASE_LOST = "lease lost"
WORKER_ID = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def load_reward_config(session: Session, job_id: str, version: int) -> RewardConfig:
    repository = JobRepository(session)
    config = repository.get_config_version(job_id, version)
    if config is None:
        raise LookupError(f"job {job_id} has no config version {version}")
    keys = [(name, int(entry["version"])) for name, entry in config.reward_functions.items()]
    sources = repository.function_sources(job_id, keys)
    return RewardConfig(
        version=config.version,
        functions=[
            RewardFunctionSpec(
                name=name,
                source=sources[(name, function_version)].source,
                weight=float(config.reward_functions[name]["weight"]),
                **run_settings(config.reward_functions[name]),
                version=function_version,
            )
            for name, function_version in keys
        ],
        temperature=config.temperature,
        top_p=config.top_p,
    )


class DatabaseObserver:
    """The training loop's view of the job row: records steps, reads cancel and config."""

    def __init__(
        self,
        job_id: str,
        breaker: RewardCircuitBreaker,
        store: ArtifactStore,
        watcher: JobWatcher | None = None,
        signals: SignalMonitor | None = None,
    ) -> None:
        self.job_id = job_id
        # Signs that the run is not learning (no reward variation, reward hacking): warnings.
        self.signals = signals
        self.breaker = breaker
        self.store = store
        # Cancel, pause and config changes arrive through the watcher; without one (or before
        # its first read) the job row is read here, once per step.
        self.watcher = watcher
        # Steps and checkpoints are stored off the training thread, in order; close() waits
        # for them, so the job's final status is set only once all its rows are stored.
        self.writer = BackgroundWriter(job_id)
        # Where new secrets go (poll_reward_config): the ranks' sandboxes restart with them.
        self.sandbox: StagesEnvironment | None = None

    def close(self, *, raise_failure: bool = True) -> None:
        """Store everything still queued; raise if a record could not be stored."""
        self.writer.close(raise_failure=raise_failure)

    def on_step(self, record: StepRecord) -> None:
        # Blocks only while the writer is several steps behind; raises if a write failed.
        self.writer.submit(lambda: store_step(self.job_id, record))
        observe_step(record)
        self.breaker.observe(record)
        if self.signals is not None:
            for warning in self.signals.observe_step(record):
                # After the step's record: a warning never names a step not yet stored.
                self.writer.submit(functools.partial(store_warning, self.job_id, warning))

    def on_checkpoint(self, step: int, path: Path) -> None:
        size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.exists() else 0

        # Where it is stored is the server's business; clients download it from here.
        download_path = f"/v1/jobs/{self.job_id}/checkpoints/{step}/adapter.tar.gz"

        def write(uri: str) -> None:
            with session_scope() as session:
                session.merge(Checkpoint(job_id=self.job_id, step=step, path=uri, size_bytes=size))
                JobRepository(session).add_event(
                    self.job_id,
                    "checkpoint",
                    f"checkpoint saved at step {step}",
                    step=step,
                    data={"download_path": download_path},
                )

        def keep() -> None:
            # Uploading (S3) happens off the training thread too.
            uri = self.store.save_directory(path, f"{self.job_id}/checkpoint-{step}")
            with_database_retries(lambda: write(uri), what="recording a checkpoint")

        # Through the writer: the checkpoint row must not be stored before the step records
        # it covers (a resume re-runs only the steps after it).
        self.writer.submit(keep)

    def on_config_rejected(self, version: int, message: str) -> None:
        def write() -> None:
            with session_scope() as session:
                JobRepository(session).add_event(
                    self.job_id,
                    "config_rejected",
                    f"config v{version} could not be loaded by the worker; training goes on "
                    f"with the config in force: {message}",
                    data={"config_version": version},
                )

        with_database_retries(write, what="recording a rejected config")

    def _job_state(self) -> JobState | None:
        if self.watcher is not None and self.watcher.state is not None:
            return self.watcher.state

        def read() -> JobState | None:
            with session_scope() as session:
                job = JobRepository(session).get_any_tenant(self.job_id)
                if job is None:
                    return None
                return JobState(job.status, job.worker_id, job.config_version)

        return with_database_retries(read, what="reading the job's state")

    def should_stop(self) -> str | None:
        if self.breaker.tripped:
            return self.breaker.tripped
        state = self._job_state()
        if state is None:
            return "the job was deleted"
        if state.worker_id != WORKER_ID:
            # Another worker took the job over (we were presumed dead): stop quietly.
            return LEASE_LOST
        if state.status != JobStatus.RUNNING.value:
            return state.status
        return None

    def poll_reward_config(self, current_version: int, starting_step: int) -> RewardConfig | None:
        # The step begins under the job's row lock, reading the newest version in the same
        # statement. A config update holds that lock while it reads started_step to answer
        # applies_from_step, so what it answers is exactly where the version is picked up
        # (service.job_configs.service.first_step_of_next_version).
        def begin() -> tuple[int, str | None] | None:
            with session_scope() as session:
                # Not worth a WAL flush (measured: ~2 ms instead of ~9 on a busy 2-core
                # machine, per step): a crash loses only where a step began, and a resumed
                # run writes that again (_start).
                session.execute(text("SET LOCAL synchronous_commit TO off"))
                row = session.execute(
                    update(Job)
                    .where(Job.id == self.job_id, Job.worker_id == WORKER_ID)
                    .values(started_step=starting_step)
                    .returning(Job.config_version, Job.secrets_sealed)
                ).one_or_none()
                return None if row is None else (row[0], row[1])

        # None: the job is gone or another worker holds it; should_stop() says so.
        begun = with_database_retries(begin, what="beginning a step")
        if begun is None or begun[0] <= current_version:
            return None
        version, secrets_sealed = begun

        def read() -> RewardConfig:
            with session_scope() as session:
                return load_reward_config(session, self.job_id, version)

        config = with_database_retries(read, what="loading the new reward config")
        if self.sandbox is not None:
            # The update may have rotated the job's secrets: the sandbox restarts with them
            # when this version's functions are loaded.
            self.sandbox.stage_environment(unseal(secrets_sealed, get_settings()))
        return config


def _start(job_id: str) -> Checkpoint | Literal[False] | None:
    """queued -> running under the row lock, taking the lease.

    Returns the checkpoint to resume from (None: start afresh), or False when the job should
    not run here.
    """
    with session_scope() as session:
        repository = JobRepository(session)
        job = repository.get_any_tenant(job_id, for_update=True)
        if job is None:
            logger.warning("job %s does not exist; dropping the message", job_id)
            return False
        if job.status != JobStatus.QUEUED.value:
            # A duplicate or stale message: the database, not the queue, says what runs.
            logger.info("job %s is %s, not queued; nothing to do", job_id, job.status)
            return False
        transition(session, job, JobStatus.RUNNING)
        job.worker_id = WORKER_ID
        job.heartbeat_at = datetime.now(UTC)
        checkpoint = repository.latest_checkpoint(job_id)
        # The run goes on after the checkpoint: a config stored now applies from the step
        # after it (steps after the checkpoint that ran before are re-run).
        job.started_step = checkpoint.step if checkpoint is not None else 0
        if checkpoint is not None:
            repository.add_event(
                job_id,
                "resumed",
                f"resuming from the checkpoint at step {checkpoint.step} on {WORKER_ID}; "
                f"steps after it are re-run and their records replaced",
                step=checkpoint.step,
                data={"checkpoint_step": checkpoint.step, "worker_id": WORKER_ID},
            )
        return checkpoint


def _release(job_id: str) -> None:
    """Give the lease back, so a paused job may be resumed elsewhere."""

    def write() -> None:
        with session_scope() as session:
            job = JobRepository(session).get_any_tenant(job_id, for_update=True)
            if job is None or job.worker_id != WORKER_ID:
                return
            job.worker_id = None
            if job.status == JobStatus.PAUSED.value:
                JobRepository(session).add_event(
                    job_id,
                    "paused",
                    f"paused after step {job.steps_completed}; the worker is free and the job "
                    "resumes from this step's checkpoint",
                    step=job.steps_completed,
                )

    with_database_retries(write, what=f"releasing job {job_id}")


def _finish(job_id: str, target: JobStatus, *, reason: str | None, adapter: str | None) -> None:
    def write() -> None:
        with session_scope() as session:
            job = JobRepository(session).get_any_tenant(job_id, for_update=True)
            if job is None or job.status != JobStatus.RUNNING.value or job.worker_id != WORKER_ID:
                return  # cancelled, paused or taken over by someone else: their status stands
            if adapter is not None:
                job.adapter_path = adapter
            transition(session, job, target, reason=reason)

    with_database_retries(write, what=f"finishing job {job_id}")


@dataclass
class JobPlan:
    spec: TrainingSpec
    allow_network: bool
    runtime_packages: list[str]
    secrets: dict[str, str]
    num_devices: int = 1
    engine: str = "ddp"


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


def _plan(
    job_id: str, settings: Settings, store: ArtifactStore, resume_from: Checkpoint | None
) -> JobPlan:
    from workers.training.spec import TrainingSpec

    with session_scope() as session:
        job = JobRepository(session).get_any_tenant(job_id)
        assert job is not None
        dataset, validation = _training_and_validation_rows(session, job)
        spec = TrainingSpec(
            base_model=job.base_model,
            dataset=dataset,
            validation=validation,
            reward_config=load_reward_config(session, job_id, job.config_version),
            hyperparameters=Hyperparameters.from_stored(job.hyperparameters),
            output_dir=settings.resolved_artifacts_dir / job_id,
            model_cache_dir=settings.resolved_model_cache_dir,
            resume_from_checkpoint=_usable(
                resume_from, store, settings.resolved_artifacts_dir / job_id
            ),
            # Settings this machine cannot honour fail the job here, before any work.
            generation=choose_generation(settings),
        )
        return JobPlan(
            spec,
            job.allow_network,
            list(job.runtime_packages or []),
            unseal(job.secrets_sealed, settings),
            job.num_devices,
            job.engine,
        )


def _rank_job(plan: JobPlan) -> RankJob:
    """What the training processes need; runtime packages are installed here, once."""
    packages = (
        install_runtime_packages(plan.runtime_packages, plan.spec.output_dir / "runtime-packages")
        if plan.runtime_packages
        else None
    )
    return RankJob(
        spec=plan.spec,
        allow_network=plan.allow_network,
        secrets=plan.secrets,
        packages_path=packages,
        report_to=list(plan.spec.hyperparameters.report_to),
    )


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


def run_training_job(job_id: str) -> None:
    """Train the job to its end, recording every step; the final status says how it ended."""
    if _num_nodes(job_id) > 1:
        _run_node_of_job(job_id)
        return
    started = _start(job_id)
    if started is False:
        return
    _run_started(job_id, started)


def _run_started(job_id: str, started: Checkpoint | None, nodes: NodeRun | None = None) -> None:
    settings = get_settings()
    with (
        JobHeartbeat(job_id, WORKER_ID, interval_s=max(0.5, settings.worker_lease_s / 6)),
        JobWatcher(job_id, settings.require_database_url()) as watcher,
    ):
        _train(job_id, settings, started, watcher, nodes)
    _release(job_id)


def _num_nodes(job_id: str) -> int:
    def read() -> int:
        with session_scope() as session:
            return session.scalar(select(Job.num_nodes).where(Job.id == job_id)) or 1

    return with_database_retries(read, what=f"reading job {job_id}")


def _run_node_of_job(job_id: str) -> None:
    """This worker's part of a job over several machines (workers.placement): node 0 runs and
    records it as a one-machine job, with rank 0 among its processes; the others run ranks."""
    with placed(job_id, WORKER_ID, take_job=lambda job_id: _start(job_id) is not False) as node:
        if node is None:
            return
        if node.seat.node_rank == 0:
            _run_started(job_id, _latest_checkpoint(job_id), node)
        else:
            _run_other_node(job_id, node)


def _latest_checkpoint(job_id: str) -> Checkpoint | None:
    # What node 0's _start resumes from; no checkpoint is added until every node's ranks run.
    def read() -> Checkpoint | None:
        with session_scope() as session:
            return JobRepository(session).latest_checkpoint(job_id)

    return with_database_retries(read, what=f"reading the checkpoints of {job_id}")


def _run_other_node(job_id: str, node: NodeRun) -> None:
    """Node 1 and up: this machine's ranks of the job, until they end or node 0 stops."""
    settings = get_settings()
    try:
        plan = _plan(job_id, settings, artifact_store(settings), _latest_checkpoint(job_id))
        run_node_processes(
            _rank_job(plan),
            num_processes=plan.num_devices,
            engine=plan.engine,
            rendezvous=node.rendezvous,
            watchdog=node.follower_watchdog,
        )
    except NodeLost as stopped:
        logger.info("job %s: node %d stops: %s", job_id, node.seat.node_rank, stopped)
        return
    except Exception as exc:
        logger.exception("job %s: node %d failed", job_id, node.seat.node_rank)
        node.report(FAILED, describe_failure(exc))
        return
    node.report(FINISHED)


def _train(
    job_id: str,
    settings: Settings,
    resume_from: Checkpoint | None,
    watcher: JobWatcher,
    nodes: NodeRun | None = None,
) -> None:
    """Run the training and set the final status (unless someone else ended the job).

    With ``nodes``, this is node 0 of a job over several machines: a lost node sends the job
    back to the queue instead of failing it."""
    try:
        store = artifact_store(settings)
        plan = _plan(job_id, settings, store, resume_from)
        _record_generation(job_id, plan.spec)
        hyperparameters = plan.spec.hyperparameters
        observer = DatabaseObserver(
            job_id,
            RewardCircuitBreaker(
                max_error_rate=hyperparameters.reward_error_rate_limit,
                patience=hyperparameters.reward_error_patience,
            ),
            store,
            watcher,
            SignalMonitor(
                signal_settings(hyperparameters),
                max_completion_length=hyperparameters.max_completion_length,
            ),
        )
        try:
            check_trackers_installed(hyperparameters.report_to)
            _check_capacity(plan.num_devices, settings.resolved_worker_devices)
            environment = EnvironmentRecorder()
            observer.sandbox = environment
            # The training runs in processes of its own (each rank with its own sandbox);
            # this process records what rank 0 reports and decides when to stop.
            outcome = _run_processes(plan, observer, environment, nodes)
            adapter = store.save_directory(outcome.adapter_path, f"{job_id}/adapter")
        except BaseException:
            # The run's own error is the one to report; what was queued is still stored.
            observer.close(raise_failure=False)
            raise
        observer.close()
    except NodeLost as lost:
        assert nodes is not None
        nodes.requeue(lost)
        return
    except Exception as exc:
        logger.exception("job %s failed", job_id)
        _finish(job_id, JobStatus.FAILED, reason=describe_failure(exc), adapter=None)
        return
    if observer.breaker.tripped:
        _finish(job_id, JobStatus.FAILED, reason=observer.breaker.tripped, adapter=None)
    elif outcome.stop_reason is None:
        verdict = _no_signal_verdict(job_id, hyperparameters)
        if verdict is not None and hyperparameters.fail_on_no_signal:
            reason = f"fail_on_no_signal: {verdict.message}"
            _finish(job_id, JobStatus.FAILED, reason=reason, adapter=None)
        else:
            _finish(job_id, JobStatus.SUCCEEDED, reason=None, adapter=adapter)
    # Otherwise someone else ended or paused the job: their status stands.


def _run_processes(
    plan: JobPlan,
    observer: DatabaseObserver,
    environment: EnvironmentRecorder,
    nodes: NodeRun | None,
) -> TrainingOutcome:
    try:
        return run_grpo_in_processes(
            _rank_job(plan),
            observer,
            environment,
            num_processes=plan.num_devices,
            engine=plan.engine,
            rendezvous=nodes.rendezvous if nodes is not None else None,
            watchdog=nodes.coordinator_watchdog if nodes is not None else None,
        )
    except TrainingProcessError as failure:
        if nodes is None:
            raise
        # Our ranks fail too when another node's go: its story is the one to tell.
        raise nodes.settle(failure) from failure


def _check_capacity(num_devices: int, worker_devices: int) -> None:
    # Queues keep larger jobs away (workers.queue); a message from before jobs had sizes
    # is the one way here, and a job is never silently shrunk.
    if num_devices > worker_devices:
        raise TrainingProcessError(
            f"the job asks for {num_devices} devices; this worker can give a job at most "
            f"{worker_devices} (RFT_WORKER_DEVICES)"
        )


def signal_settings(hyperparameters: Hyperparameters) -> SignalSettings:
    return SignalSettings(
        no_signal_threshold=hyperparameters.no_signal_threshold,
        patience=hyperparameters.warning_patience,
    )


def store_warning(job_id: str, warning: TrainingWarning) -> None:
    """A 'warning' event, and the warning added to the job's own list.

    Once per kind, step (and function): a run resumed from a checkpoint re-runs the steps
    after it, and may see the same episode again.
    """
    identity = {"kind": warning.kind, "step": warning.step}
    if "function" in warning.data:
        identity["function"] = warning.data["function"]

    def write() -> None:
        with session_scope() as session:
            added = session.execute(
                text(
                    "UPDATE jobs SET warnings = warnings || CAST(:added AS jsonb) "
                    "WHERE id = :id AND NOT warnings @> CAST(:identity AS jsonb) RETURNING id"
                ),
                {
                    "added": json.dumps([warning.as_json()]),
                    "identity": json.dumps([identity]),
                    "id": job_id,
                },
            ).first()
            if added is None:
                return
            JobRepository(session).add_event(
                job_id, "warning", warning.message, step=warning.step, data=warning.as_json()
            )

    with_database_retries(write, what=f"recording a {warning.kind} warning")


def _no_signal_verdict(job_id: str, hyperparameters: Hyperparameters) -> TrainingWarning | None:
    """Whether the finished run learned from (almost) nothing; if so, the job says so.

    Read from the stored steps, not the monitor: a resumed run's monitor saw only its part.
    """

    def read() -> list[tuple[int, float | None]]:
        with session_scope() as session:
            rows = session.execute(
                select(Step.step, Step.frac_reward_zero_std)
                .where(Step.job_id == job_id)
                .order_by(Step.step)
            ).all()
            return [(row[0], row[1]) for row in rows]

    steps = with_database_retries(read, what="reading the run's learning signal")
    if not steps:
        return None
    verdict = no_signal_run_warning(
        [fraction for _, fraction in steps], steps[-1][0], signal_settings(hyperparameters)
    )
    if verdict is not None:
        store_warning(job_id, verdict)
    return verdict


def _record_generation(job_id: str, spec: TrainingSpec) -> None:
    """Say in the job's events what generates its completions (vLLM or transformers)."""
    generation = spec.generation

    def write() -> None:
        with session_scope() as session:
            JobRepository(session).add_event(
                job_id,
                "generation",
                f"generation: {generation.describe()}",
                data={
                    "backend": generation.backend,
                    "mode": generation.mode,
                    "device": generation.device,
                    "worker_id": WORKER_ID,
                    "why_not_vllm": generation.why_not_vllm,
                },
            )

    with_database_retries(write, what="recording the generation backend")


def describe_failure(exc: BaseException) -> str:
    """One readable line for the job's failure_reason; the traceback goes to the logs."""
    if isinstance(
        exc,
        PackageInstallError
        | SecretsKeyError
        | GenerationSetupError
        | TrackerSetupError
        | TrainingProcessError,
    ):
        return str(exc)
    last_frame = traceback.extract_tb(exc.__traceback__)[-1:] if exc.__traceback__ else []
    where = (
        f" (at {Path(last_frame[0].filename).name}:{last_frame[0].lineno})" if last_frame else ""
    )
    return f"{type(exc).__name__}: {exc}{where}"[:2000]
