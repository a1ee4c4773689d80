"""Runs one job from its id: the plain function behind the Celery task, testable without Celery.

The worker takes the job (service.jobs.ownership.take), plans it (workers.job_plan), starts
its training processes (workers.training.launch) with a DatabaseObserver answering rank 0
(workers.database_observer), and ends the lease with one of ownership's moves: finish, fail,
requeue (a lost node) or release (a pause, a cancel). A job over several machines first waits
for its placement (workers.placement); node 0 then runs it as above.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from service.artifacts.repository import CheckpointRepository
from service.artifacts.storage import artifact_store
from service.events.repository import EventRepository
from service.jobs import ownership
from service.jobs.hyperparameters import Hyperparameters
from service.jobs.repository import JobRepository
from service.jobs.step_repository import StepRepository
from service.leases import HeldBy
from service.models import Checkpoint
from service.settings import Settings, get_settings
from service.usage.throughput import record_run_kind
from workers.advertised_devices import device_kind
from workers.circuit_breaker import RewardCircuitBreaker
from workers.database import in_transaction
from workers.database_observer import DatabaseObserver, store_warning
from workers.failures import NodeLost, TrainingProcessError, describe_failure
from workers.guards import GuardMonitor
from workers.identity import WORKER_ID
from workers.job_plan import JobPlan, plan_job, rank_job
from workers.job_watch import JobWatcher
from workers.lease import JobHeartbeat
from workers.placement import NodeRun, placed
from workers.training.launch import WarmProcesses, run_node_processes, run_training_processes
from workers.training.trackers import check_trackers_installed
from workers.training_signals import (
    SignalMonitor,
    SignalSettings,
    TrainingWarning,
    no_signal_run_warning,
)

if TYPE_CHECKING:
    from workers.training.spec import TrainingOutcome, TrainingSpec

logger = logging.getLogger(__name__)

HELD = HeldBy(WORKER_ID)


def run_training_job(job_id: str, warm: WarmProcesses | None = None) -> None:
    """Train the job to its end, recording every step; the final status says how it ended.

    ``warm``: the worker's warm training processes (its spare, a kept engine's holder)."""
    num_nodes = in_transaction(
        lambda session: JobRepository(session).num_nodes(job_id), what=f"reading job {job_id}"
    )
    if num_nodes > 1:
        _run_node_of_job(job_id, warm)
        return
    taken = _take(job_id)
    if taken is None:
        return
    _run_taken(job_id, taken.resume_from, warm=warm)


def _take(job_id: str) -> ownership.Taken | None:
    taken = in_transaction(
        lambda session: ownership.take(session, job_id, WORKER_ID), what=f"taking job {job_id}"
    )
    if taken is None:
        logger.info("job %s is gone or not queued; dropping the message", job_id)
    return taken


def _run_taken(
    job_id: str,
    resume_from: Checkpoint | None,
    nodes: NodeRun | None = None,
    warm: WarmProcesses | None = None,
) -> None:
    settings = get_settings()
    with (
        JobHeartbeat(job_id, WORKER_ID, interval_s=max(0.5, settings.worker_lease_s / 6)),
        JobWatcher(job_id, settings.require_database_url()) as watcher,
    ):
        _train(job_id, settings, resume_from, watcher, nodes, warm)
    in_transaction(
        lambda session: ownership.release(session, job_id, HELD), what=f"releasing job {job_id}"
    )


def _run_node_of_job(job_id: str, warm: WarmProcesses | None) -> None:
    """This worker's part of a job over several machines (workers.placement): node 0 runs and
    records it as a one-machine job, with rank 0 among its processes; the others run ranks."""
    with placed(job_id, WORKER_ID, take_job=lambda job_id: _take(job_id) is not None) as node:
        if node is None:
            return
        if node.seat.node_rank == 0:
            _run_taken(job_id, _latest_checkpoint(job_id), node, warm)
        else:
            _run_other_node(job_id, node, warm)


def _latest_checkpoint(job_id: str) -> Checkpoint | None:
    # What node 0's take resumes from; no checkpoint is added until every node's ranks run.
    return in_transaction(
        lambda session: CheckpointRepository(session).latest_checkpoint(job_id),
        what=f"reading the checkpoints of {job_id}",
    )


def _plan(job_id: str, settings: Settings, resume_from: Checkpoint | None) -> JobPlan:
    store = artifact_store(settings)
    return in_transaction(
        lambda session: plan_job(session, job_id, settings, store, resume_from),
        what=f"planning job {job_id}",
    )


def _run_other_node(job_id: str, node: NodeRun, warm: WarmProcesses | None) -> None:
    """Node 1 and up: this machine's ranks of the job, until they end or node 0 stops."""
    settings = get_settings()
    try:
        plan = _plan(job_id, settings, _latest_checkpoint(job_id))
        run_node_processes(
            rank_job(plan),
            num_processes=plan.num_devices,
            engine=plan.engine,
            rendezvous=node.rendezvous,
            watchdog=node.follower_watchdog,
            warm=warm,
        )
    except NodeLost as stopped:
        logger.info("job %s: node %d stops: %s", job_id, node.seat.node_rank, stopped)
        return
    except Exception as exc:
        logger.exception("job %s: node %d failed", job_id, node.seat.node_rank)
        node.report_failed(describe_failure(exc))
        return
    node.report_finished()


def _train(
    job_id: str,
    settings: Settings,
    resume_from: Checkpoint | None,
    watcher: JobWatcher,
    nodes: NodeRun | None = None,
    warm: WarmProcesses | None = None,
) -> None:
    """Run the training and set the final status (unless someone else ended the job).

    With ``nodes``, this is node 0 of a job over several machines: a lost node sends the job
    back to the queue instead of failing it."""
    try:
        store = artifact_store(settings)
        plan = _plan(job_id, settings, resume_from)
        _record_run_kind(job_id, plan.spec)
        if plan.spec.method == "grpo":  # a supervised job generates nothing
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
            # A supervised step has no completions or rewards for the guards to read.
            GuardMonitor(
                plan.guards,
                max_completion_length=hyperparameters.max_completion_length,
                already_paused=plan.guards_that_paused,
            )
            if plan.spec.method == "grpo"
            else None,
        )
        try:
            check_trackers_installed(hyperparameters.report_to)
            _check_capacity(plan.num_devices, settings.resolved_worker_devices)
            # The training runs in processes of its own (each rank with its own sandbox);
            # this process records what rank 0 reports and decides when to stop.
            outcome = _run_processes(plan, observer, nodes, warm)
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
        _fail(job_id, describe_failure(exc))
        return
    if observer.breaker.tripped:
        _fail(job_id, observer.breaker.tripped)
    elif outcome.stop_reason is None:
        verdict = _no_signal_verdict(job_id, hyperparameters)
        if verdict is not None and hyperparameters.fail_on_no_signal:
            _fail(job_id, f"fail_on_no_signal: {verdict.message}")
        else:
            in_transaction(
                lambda session: ownership.finish(session, job_id, HELD, adapter=adapter),
                what=f"finishing job {job_id}",
            )
    # Otherwise someone else ended or paused the job: release() settles it.


def _fail(job_id: str, reason: str) -> None:
    in_transaction(
        lambda session: ownership.fail(session, job_id, HELD, reason=reason),
        what=f"failing job {job_id}",
    )


def _run_processes(
    plan: JobPlan, observer: DatabaseObserver, nodes: NodeRun | None, warm: WarmProcesses | None
) -> TrainingOutcome:
    try:
        return run_training_processes(
            rank_job(plan),
            observer,
            warm=warm,
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
    # Queues keep larger jobs away (service.work_queue.queue); a message from before jobs had sizes
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


def _no_signal_verdict(job_id: str, hyperparameters: Hyperparameters) -> TrainingWarning | None:
    """Whether the finished run learned from (almost) nothing; if so, the job says so.

    Read from the stored steps, not the monitor: a resumed run's monitor saw only its part.
    """
    steps = in_transaction(
        lambda session: StepRepository(session).zero_std_fractions(job_id),
        what="reading the run's learning signal",
    )
    if not steps:
        return None
    verdict = no_signal_run_warning(
        [fraction for _, fraction in steps], steps[-1][0], signal_settings(hyperparameters)
    )
    if verdict is not None:
        store_warning(job_id, verdict)
    return verdict


def _record_run_kind(job_id: str, spec: TrainingSpec) -> None:
    """Say what this run's steps are measured as (service.usage.throughput): the kind of device
    it trains on and what generates its completions."""
    generation = spec.generation
    kind = device_kind("cuda" if generation.device.startswith("cuda") else "cpu")
    in_transaction(
        lambda session: record_run_kind(session, job_id, kind, generation.backend),
        what="recording the run's device kind",
    )


def _record_generation(job_id: str, spec: TrainingSpec) -> None:
    """Say in the job's events what generates its completions (vLLM or transformers)."""
    generation = spec.generation
    in_transaction(
        lambda session: EventRepository(session).add_event(
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
        ),
        what="recording the generation backend",
    )
