"""A dry run of a config update: the last recorded step's completions re-scored with the
proposed reward functions, nothing stored (PUT /v1/jobs/{id}/config?dry_run=true)."""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy.orm import Session

from sandbox.agent_api import answer_trajectory
from sandbox.api import FunctionResult, RewardCodeError, RewardFunctionSpec
from service.datasets.repository import DatasetRepository
from service.errors import InvalidRewardFunction
from service.job_configs.proposed import (
    agent_code_after,
    check_read_only_fields,
    load_proposed_agent_code,
    secrets_after,
)
from service.job_configs.repository import JobConfigRepository
from service.job_configs.schemas import DryRunResult, JobConfigUpdate, RescoredCompletion
from service.jobs.service import get_job
from service.jobs.step_repository import StepRepository
from service.models import Completion, Job
from service.reward_functions.schemas import (
    RewardFunctionCreate,
    code_entries,
    model_entries,
    run_settings,
)
from service.reward_functions.scoring import score_once
from service.reward_functions.service import check_reward_functions, check_reward_models
from service.reward_functions.totals import weighted_total


def dry_run_update(
    session: Session, tenant_id: str, job_id: str, update: JobConfigUpdate
) -> DryRunResult:
    """Re-score the last recorded step's completions with the proposed functions.

    Proposed tools and environments are loaded (400 when they cannot be) but take no part in
    the re-score: that would take new rollouts, not the recorded ones. Reward models are not
    run here (the API has no model runtime): an entry naming the model that scored the step
    keeps its recorded scores (so a new weight is previewed exactly); one naming another
    model is checked, listed in ``not_scored``, and left out of the new totals.
    """
    job = get_job(session, tenant_id, job_id)
    check_read_only_fields(job, update)
    check_reward_functions(update.reward_functions)
    check_reward_models(update.reward_functions)
    secrets = secrets_after(job, update)
    load_proposed_agent_code(job, update, agent_code_after(session, job, update), secrets)
    last_step = job.steps_completed
    completions = (
        StepRepository(session).list_completions(
            job.id, step=last_step, after=None, limit=1_000_000
        )
        if last_step
        else []
    )
    if not completions or not update.reward_functions:
        return DryRunResult(step=None, completions=[], advantage_sign_changes=0, errors={})
    functions = code_entries(update.reward_functions)
    results = _rescore_functions(session, job, functions, completions, secrets)
    recorded = _reward_models_of(session, job.id, completions[0].config_version)
    kept = [
        n for n, e in model_entries(update.reward_functions).items() if recorded.get(n) == e.model
    ]
    not_scored = [n for n in model_entries(update.reward_functions) if n not in kept]
    names = [*functions, *kept]
    weights = [update.reward_functions[n].weight for n in names]

    def new_scores(i: int, completion: Completion) -> dict[str, float | None]:
        scores = {n: results[n].scores[i] for n in functions}
        scores.update({n: completion.scores.get(n) for n in kept})
        return scores

    rescored_scores = [new_scores(i, c) for i, c in enumerate(completions)]
    new_totals = [weighted_total([scores[n] for n in names], weights) for scores in rescored_scores]
    old_signs = _advantage_signs(
        [c.prompt_index for c in completions], [c.total for c in completions]
    )
    new_signs = _advantage_signs([c.prompt_index for c in completions], new_totals)
    rescored = [
        RescoredCompletion(
            completion_id=c.id,
            prompt_index=c.prompt_index,
            group_position=c.group_position,
            old_scores=c.scores,
            new_scores={**rescored_scores[i], **{n: None for n in not_scored}},
            old_total=c.total,
            new_total=new_totals[i],
            old_advantage_sign=old_signs[i],
            new_advantage_sign=new_signs[i],
        )
        for i, c in enumerate(completions)
    ]
    return DryRunResult(
        step=last_step,
        completions=rescored,
        advantage_sign_changes=sum(o != n for o, n in zip(old_signs, new_signs, strict=True)),
        errors={n: [e.message for e in r.errors] for n, r in results.items() if r.errors},
        not_scored=not_scored,
    )


def _rescore_functions(
    session: Session,
    job: Job,
    functions: Mapping[str, RewardFunctionCreate],
    completions: list[Completion],
    secrets: dict[str, str],
) -> dict[str, FunctionResult]:
    """The proposed functions' results on the recorded completions, in the sandbox."""
    if not functions:
        return {}
    rows = DatasetRepository(session).rows_at(
        job.dataset_id, {c.dataset_index for c in completions if c.dataset_index is not None}
    )
    specs = [
        RewardFunctionSpec(
            name=name,
            source=f.source,
            weight=f.weight,
            **run_settings(f.config_entry(1)),
        )
        for name, f in functions.items()
    ]
    # An agent job's rollouts, as its training scored them (one without a record: a rollout
    # that answered at once).
    trajectories = (
        [c.trajectory or answer_trajectory(c.completion) for c in completions]
        if any(c.trajectory is not None for c in completions)
        else None
    )
    try:
        return score_once(
            specs,
            [c.prompt for c in completions],
            [c.completion for c in completions],
            [
                rows.get(-1 if c.dataset_index is None else c.dataset_index, {"prompt": c.prompt})
                for c in completions
            ],
            allow_network=job.allow_network,
            secrets=secrets,
            runtime_packages=list(job.runtime_packages or []),
            trajectories=trajectories,
            egress_hosts=job.egress_hosts or [],
        )
    except RewardCodeError as exc:
        raise InvalidRewardFunction(str(exc)) from None


def _reward_models_of(session: Session, job_id: str, version: int) -> dict[str, str]:
    """Config ``version``'s reward models: entry name -> the model it names."""
    configs = JobConfigRepository(session)
    config = configs.get_config_version(job_id, version)
    if config is None:
        return {}
    return {f.name: f.source for f in configs.stored_functions(config) if f.is_reward_model}


def _advantage_signs(groups: list[int], totals: list[float | None]) -> list[int]:
    """Sign of each total against its group's mean: GRPO's advantage sign (scaling by the
    group's std never flips it). A sample without a total gets advantage 0."""
    sums: dict[int, list[float]] = {}
    for group, total in zip(groups, totals, strict=True):
        if total is not None:
            sums.setdefault(group, []).append(total)
    signs = []
    for group, total in zip(groups, totals, strict=True):
        if total is None or group not in sums:
            signs.append(0)
            continue
        mean = sum(sums[group]) / len(sums[group])
        delta = total - mean
        signs.append(0 if abs(delta) < 1e-9 else (1 if delta > 0 else -1))
    return signs
