"""The training loop's view of the database: the TrainingObserver rank 0 talks to.

Rank 0 asks it, at every step boundary, for a newer config version (``poll_reward_config``)
and whether to stop (``should_stop``: cancel, pause, a lost lease, the reward circuit
breaker), and hands it each step's record and checkpoint, which it stores off the training
thread, in order. It lives in the worker's process (workers.training_job builds it;
workers.training.launch serves rank 0's calls on it).
"""

from __future__ import annotations

import functools
from pathlib import Path

from sqlalchemy.orm import Session

from service.artifacts.repository import CheckpointRepository
from service.artifacts.storage import ArtifactStore
from service.events.repository import EventRepository
from service.job_configs.repository import JobConfigRepository
from service.jobs import ownership
from service.jobs.repository import JobRepository
from service.jobs.status import JobStatus
from service.leases import HeldBy
from service.secrets import unseal
from service.settings import get_settings
from service.webhooks import outbox as webhook_outbox
from workers.circuit_breaker import RewardCircuitBreaker
from workers.database import in_transaction
from workers.guards import GuardMonitor, GuardTrip
from workers.identity import WORKER_ID
from workers.job_watch import JobState, JobWatcher
from workers.metrics import observe_step
from workers.step_store import BackgroundWriter, store_step
from workers.training.step_records import RewardConfig, RewardModelSpec, StepRecord
from workers.training_signals import SignalMonitor, TrainingWarning

LEASE_LOST = "lease lost"


def load_reward_config(
    session: Session, job_id: str, version: int, secrets: dict[str, str]
) -> RewardConfig:
    """Config ``version`` of the job as the ranks apply it, with the job's ``secrets``."""
    configs = JobConfigRepository(session)
    config = configs.get_config_version(job_id, version)
    if config is None:
        raise LookupError(f"job {job_id} has no config version {version}")
    tools, environments = configs.stored_agent_code(config)
    functions = configs.stored_functions(config)
    return RewardConfig(
        version=config.version,
        functions=[function.spec() for function in functions if not function.is_reward_model],
        reward_models=[
            RewardModelSpec(
                name=function.name,
                model=function.source,
                weight=function.weight,
                version=function.version,
                **function.settings,
            )
            for function in functions
            if function.is_reward_model
        ],
        temperature=config.temperature,
        top_p=config.top_p,
        secrets=secrets,
        tools=[tool.spec() for tool in tools],
        environments=[environment.spec() for environment in environments],
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
        guards: GuardMonitor | None = None,
        *,
        worker_id: str = WORKER_ID,
    ) -> None:
        self.job_id = job_id
        self.worker_id = worker_id
        # Signs that the run is not learning (no reward variation, reward hacking): warnings.
        self.signals = signals
        # The job's guards against reward hacking: warnings with evidence, and a pause for
        # those its guards.pause_on names.
        self.guards = guards
        # The guard that paused the job: the run stops after this step, as for a user's pause
        # (the pause is stored through the writer, after the step's record).
        self.paused_by_guard: str | None = None
        self.breaker = breaker
        self.store = store
        # Cancel, pause and config changes arrive through the watcher; without one (or before
        # its first read) the job row is read here, once per step.
        self.watcher = watcher
        # Steps and checkpoints are stored off the training thread, in order; close() waits
        # for them, so the job's final status is set only once all its rows are stored.
        self.writer = BackgroundWriter(job_id)

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
        if self.guards is not None:
            for trip in self.guards.observe_step(record):
                if trip.pauses_job and self.paused_by_guard is None:
                    self.paused_by_guard = trip.kind
                self.writer.submit(
                    functools.partial(store_guard_trip, self.job_id, trip, self.worker_id)
                )

    def on_checkpoint(self, step: int, path: Path) -> None:
        size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.exists() else 0

        # Where it is stored is the server's business; clients download it from here.
        download_path = f"/v1/jobs/{self.job_id}/checkpoints/{step}/adapter.tar.gz"

        def write(session: Session, uri: str) -> None:
            CheckpointRepository(session).save(self.job_id, step, uri, size)
            EventRepository(session).add_event(
                self.job_id,
                "checkpoint",
                f"checkpoint saved at step {step}",
                step=step,
                data={"download_path": download_path},
            )

        def keep() -> None:
            # Uploading (S3) happens off the training thread too.
            uri = self.store.save_directory(path, f"{self.job_id}/checkpoint-{step}")
            in_transaction(lambda session: write(session, uri), what="recording a checkpoint")

        # Through the writer: the checkpoint row must not be stored before the step records
        # it covers (a resume re-runs only the steps after it).
        self.writer.submit(keep)

    def on_config_rejected(self, version: int, message: str) -> None:
        in_transaction(
            lambda session: EventRepository(session).add_event(
                self.job_id,
                "config_rejected",
                f"config v{version} could not be loaded by the worker; training goes on "
                f"with the config in force: {message}",
                data={"config_version": version},
            ),
            what="recording a rejected config",
        )

    def _job_state(self) -> JobState | None:
        if self.watcher is not None and self.watcher.state is not None:
            return self.watcher.state
        state = in_transaction(
            lambda session: JobRepository(session).status_of(self.job_id),
            what="reading the job's state",
        )
        return None if state is None else JobState(*state)

    def should_stop(self) -> str | None:
        if self.breaker.tripped:
            return self.breaker.tripped
        if self.paused_by_guard is not None:
            # Not waiting for the row: the pause is queued behind this step's record, and the
            # run would otherwise train a step or two more on what the guard caught.
            return JobStatus.PAUSING.value
        state = self._job_state()
        if state is None:
            return "the job was deleted"
        if state.worker_id != self.worker_id:
            # Another worker took the job over (we were presumed dead): stop quietly.
            return LEASE_LOST
        if state.status != JobStatus.RUNNING.value:
            return state.status  # cancelled, or pausing: the step's checkpoint is saved
        return None

    def poll_reward_config(self, current_version: int, starting_step: int) -> RewardConfig | None:
        # The step begins under the job's row lock, reading the newest version (and the job's
        # secrets as of it) in the same statement: see JobRepository.begin_step.
        begun = in_transaction(
            lambda session: JobRepository(session).begin_step(
                self.job_id, self.worker_id, starting_step
            ),
            what="beginning a step",
        )
        # None: the job is gone or another worker holds it; should_stop() says so.
        if begun is None or begun[0] <= current_version:
            return None
        version, secrets_sealed = begun
        # The update may have rotated the job's secrets: they travel with its version, and
        # each rank's sandbox restarts with them when it loads this version's functions.
        secrets = unseal(secrets_sealed, get_settings())
        return in_transaction(
            lambda session: load_reward_config(session, self.job_id, version, secrets),
            what="loading the new reward config",
        )


def store_warning(job_id: str, warning: TrainingWarning) -> None:
    """A 'warning' event, and the warning added to the job's own list.

    Once per kind, step (and function): a run resumed from a checkpoint re-runs the steps
    after it, and may see the same episode again.
    """
    identity = {"kind": warning.kind, "step": warning.step}
    if "function" in warning.data:
        identity["function"] = warning.data["function"]

    def write(session: Session) -> None:
        if JobRepository(session).add_warning(job_id, warning.as_json(), identity):
            EventRepository(session).add_event(
                job_id, "warning", warning.message, step=warning.step, data=warning.as_json()
            )

    in_transaction(write, what=f"recording a {warning.kind} warning")


def store_guard_trip(job_id: str, trip: GuardTrip, worker_id: str) -> None:
    """A 'guard_tripped' event with the evidence, the trip added to the job's warnings (the
    dashboard's banner, ``rft jobs get``/``watch``), and the job pausing when the trip says so.

    Once per guard and step, as store_warning: a resumed run re-runs steps after its
    checkpoint and may trip the same guard at the same step again.
    """

    def write(session: Session) -> None:
        # The pause first, so the stored trip says whether it paused the job (a job cancelled
        # or paused meanwhile is not); a resumed run asks no pause of a guard that paused it.
        paused = trip.pauses_job and ownership.pause(session, job_id, HeldBy(worker_id))
        stored = {**trip.as_json(), "paused_job": paused}
        if JobRepository(session).add_warning(
            job_id, stored, {"kind": trip.kind, "step": trip.step}
        ):
            EventRepository(session).add_event(
                job_id, "guard_tripped", trip.message, step=trip.step, data=stored
            )
            webhook_outbox.guard_tripped(session, job_id, stored)

    in_transaction(write, what=f"recording the {trip.kind} guard")
