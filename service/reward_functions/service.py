"""Trying reward functions on samples before paying for training."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy.orm import Session

from sandbox.agent_api import answer_trajectory, conversational_prompt
from sandbox.api import FunctionResult, RewardCodeError, RewardFunctionSpec
from sandbox.inspection import inspect_reward_source
from service.base_models.reward_models import check_reward_model
from service.datasets.repository import DatasetRepository
from service.datasets.service import get_dataset
from service.errors import InvalidRewardFunction
from service.reward_functions.schemas import (
    REWARD_MODEL_FORM,
    FunctionTestResult,
    RewardErrorOut,
    RewardFunctionCreate,
    RewardFunctionTest,
    RewardFunctionTestResult,
    RewardModelCreate,
    Sample,
    code_entries,
    model_entries,
    run_settings,
)
from service.reward_functions.scoring import score_once
from service.reward_functions.totals import weighted_total
from service.settings import Settings, get_settings

# Pre-flight completions: an empty one (a real model produces those) and an ordinary one.
PREFLIGHT_COMPLETIONS = ("", "A short sample completion.")
PREFLIGHT_ROWS = 4


def check_reward_functions(entries: Mapping[str, Any]) -> dict[str, str]:
    """Static check of every function (no user code runs here). 400 names the function.

    Each entry's form, as stored: the function's RewardForm, or REWARD_MODEL_FORM for an
    entry naming a reward model (check_reward_models checks those)."""
    forms: dict[str, str] = {}
    for name, entry in entries.items():
        if isinstance(entry, RewardModelCreate):
            forms[name] = REWARD_MODEL_FORM
            continue
        try:
            forms[name] = inspect_reward_source(name, entry.source).value
        except RewardCodeError as exc:
            raise InvalidRewardFunction(str(exc)) from None
    return forms


def check_reward_models(entries: Mapping[str, Any]) -> list[str]:
    """The pre-flight of every entry naming a reward model (service.base_models.reward_models):
    400 naming the entry, else the warnings (a path only the workers have, an unchecked hub id)
    for the job's events."""
    return [
        warning
        for name, entry in model_entries(entries).items()
        for warning in check_reward_model(name, entry.model, get_settings()).warnings
    ]


def _specs(functions: Mapping[str, RewardFunctionCreate]) -> list[RewardFunctionSpec]:
    return [
        RewardFunctionSpec(
            name=name, source=f.source, weight=f.weight, **run_settings(f.config_entry(1))
        )
        for name, f in functions.items()
    ]


def _run(
    functions: Mapping[str, RewardFunctionCreate],
    samples: list[Sample],
    *,
    allow_network: bool,
    secrets: dict[str, str],
    runtime_packages: list[str] | None = None,
    settings: Settings | None = None,
    agent: bool = False,
    egress_hosts: Sequence[str] = (),
) -> dict[str, FunctionResult]:
    """Score in a sandbox functions that passed check_reward_functions (its errors are
    cheaper and clearer than a load failure). ``agent``: as an agent job's training scores
    them (chat prompts, each completion a rollout's trajectory)."""
    try:
        return score_once(
            _specs(functions),
            [conversational_prompt(s.prompt) if agent else s.prompt for s in samples],
            [s.completion for s in samples],
            [{"prompt": s.prompt, **s.example} for s in samples],
            allow_network=allow_network,
            secrets=secrets,
            runtime_packages=runtime_packages or (),
            settings=settings,
            egress_hosts=egress_hosts,
            trajectories=[answer_trajectory(s.completion) for s in samples] if agent else None,
        )
    except RewardCodeError as exc:
        raise InvalidRewardFunction(str(exc)) from None


def dataset_samples(
    session: Session, tenant_id: str, dataset_id: str, completions: list[str], rows: int
) -> list[Sample]:
    get_dataset(session, tenant_id, dataset_id)
    data = DatasetRepository(session).rows(dataset_id, limit=rows)
    return [
        Sample(prompt=data[i % len(data)]["prompt"], completion=c, example=data[i % len(data)])
        for i, c in enumerate(completions)
    ]


def samples_to_score(session: Session, tenant_id: str, request: RewardFunctionTest) -> list[Sample]:
    """The request's samples, or rows of its dataset (checked to be the tenant's) with its
    completions."""
    if request.samples is not None:
        return request.samples
    assert request.dataset_id is not None
    completions = request.completions or [""] * request.rows
    return dataset_samples(session, tenant_id, request.dataset_id, completions, request.rows)


def try_reward_functions(
    request: RewardFunctionTest,
    samples: list[Sample],
    *,
    egress_hosts: Sequence[str] = (),
) -> RewardFunctionTestResult:
    """Score ``samples`` with the request's functions. Its reward models are checked but not
    run (the API has no model runtime: they run on the workers, on the training device);
    the result lists them in ``not_scored``. ``egress_hosts``: checked endpoint hosts (an
    endpoint grader's) the functions may reach without allow_network. Needs no database: pip
    and the sandbox may take minutes."""
    forms = check_reward_functions(request.reward_functions)
    check_reward_models(request.reward_functions)
    functions = code_entries(request.reward_functions)
    results = (
        _run(
            functions,
            samples,
            allow_network=request.allow_network,
            secrets=request.secrets,
            runtime_packages=request.runtime_packages,
            egress_hosts=egress_hosts,
        )
        if functions
        else {}
    )
    models = list(model_entries(request.reward_functions))
    for name in models:
        results[name] = FunctionResult(name=name, version=1, scores=[None] * len(samples))
    described = _describe(functions, forms, samples, results)
    described.not_scored = models
    return described


def _describe(
    functions: dict[str, RewardFunctionCreate],
    forms: dict[str, str],
    samples: list[Sample],
    results: dict[str, FunctionResult],
) -> RewardFunctionTestResult:
    """The test's result; totals over ``functions`` (the entries that ran)."""
    names = list(functions)
    weights = [functions[name].weight for name in names]
    totals = [
        weighted_total([results[name].scores[i] for name in names], weights)
        for i in range(len(samples))
    ]
    return RewardFunctionTestResult(
        samples=samples,
        totals=totals,
        results={
            name: FunctionTestResult(
                form=forms[name],
                scores=result.scores,
                errors=[
                    RewardErrorOut(
                        kind=e.kind.value,
                        message=e.message,
                        traceback=e.traceback,
                        sample_index=e.sample_index,
                    )
                    for e in result.errors
                ],
                error_rate=result.failed_samples / max(1, len(samples)),
                logs=result.logs,
                logs_truncated=result.logs_truncated,
                duration_s=result.duration_s,
            )
            for name, result in results.items()
        },
    )


def preflight(
    rows: list[dict[str, Any]],
    entries: Mapping[str, Any],
    *,
    allow_network: bool,
    secrets: dict[str, str],
    agent: bool = False,
    egress_hosts: Sequence[str] = (),
) -> None:
    """Reject (400, naming the function) functions, already statically checked, that cannot
    run at all: they fail to load, or fail on every pre-flight sample. Failing on some
    samples is the user's business: those samples get no score in training, and the error
    is recorded. Reward models among ``entries`` are not run here (check_reward_models).

    The functions are called as training will call them: ``agent`` (a job with tools or
    environments) gives each sample a trajectory, of a rollout that answered at once."""
    functions = code_entries(entries)
    if not functions:
        return
    samples = [
        Sample(prompt=row["prompt"], completion=completion, example=row)
        for row in rows[:PREFLIGHT_ROWS]
        for completion in PREFLIGHT_COMPLETIONS
    ]
    # The request waits for this (holding an API slot and a database connection): a function
    # that never returns is judged at the pre-flight limit, not at the 30 s call limit.
    settings = get_settings()
    deadline = min(settings.reward_call_timeout_s, settings.reward_preflight_timeout_s)
    quick = settings.model_copy(update={"reward_call_timeout_s": deadline})
    results = _run(
        functions,
        samples,
        allow_network=allow_network,
        secrets=secrets,
        settings=quick,
        agent=agent,
        egress_hosts=egress_hosts,
    )
    for name, result in results.items():
        if result.errors and result.failed_samples == len(samples):
            first = result.errors[0]
            raise InvalidRewardFunction(
                f"reward function {name!r} failed on every pre-flight sample "
                f"({len(samples)} samples from the dataset): {first.kind.value}: {first.message}"
            )
