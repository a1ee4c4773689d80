"""The job itself: created (or its cost estimated), read, listed, paused, resumed, cancelled,
waited for. ``Jobs`` and ``AsyncJobs`` are this and every sub-resource of the package."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import Any

from rft.agents import Environment, ToolLike, environments_request, tools_request
from rft.errors import AgentSourceError
from rft.models import (
    CostEstimate,
    Dataset,
    Guards,
    Hyperparameters,
    Job,
    JobMethod,
    Page,
    RewardFunctionsInput,
    RewardModule,
    reward_functions_request,
)
from rft.pagination import AsyncPageIterator, PageIterator, get_api_list, get_async_api_list
from rft.progress import JobProgress, job_progress
from rft.resources.jobs.checkpoints import AsyncCheckpointMethods, CheckpointMethods
from rft.resources.jobs.completions import AsyncCompletionMethods, CompletionMethods
from rft.resources.jobs.config import AsyncConfigMethods, ConfigMethods
from rft.resources.jobs.events import AsyncEventMethods, EventMethods
from rft.resources.jobs.exports import AsyncExportMethods, AsyncExports, ExportMethods, Exports
from rft.resources.jobs.report import AsyncReportMethods, ReportMethods
from rft.resources.jobs.steps import AsyncStepMethods, StepMethods
from rft.transport import AsyncTransport, RequestOptions, SyncTransport, new_idempotency_key

DEFAULT_POLL_INTERVAL_S = 1.0


def _create_request(
    *,
    dataset: str | Dataset,
    reward_functions: RewardFunctionsInput | None,
    reward_module: RewardModule | None,
    base_model: str | None,
    method: JobMethod | None = None,
    hyperparameters: Hyperparameters | Mapping[str, Any] | None,
    guards: Guards | Mapping[str, Any] | None = None,
    name: str | None,
    allow_network: bool,
    runtime_packages: Sequence[str],
    secrets: Mapping[str, str] | None,
    idempotency_key: str | None,
    validation_dataset: str | Dataset | None = None,
    validation_split: float | None = None,
    num_devices: int | None = None,
    num_nodes: int | None = None,
    engine: str | None = None,
    tools: Sequence[ToolLike] | None = None,
    environment: Environment | None = None,
    environments: Mapping[str, Environment] | None = None,
    init_from: str | Job | None = None,
    init_from_optimizer: bool = False,
) -> RequestOptions:
    if isinstance(hyperparameters, Hyperparameters):
        # Only what the caller set: the server's defaults (and presets) stay the single
        # source of truth; None means "the server's value" too.
        hyperparameters = hyperparameters.model_dump(exclude_unset=True, exclude_none=True)
    body: dict[str, Any] = {
        "dataset_id": dataset.id if isinstance(dataset, Dataset) else dataset,
        "reward_functions": reward_functions_request(reward_functions or {}),
        "hyperparameters": dict(hyperparameters or {}),
        "name": name,
        "allow_network": allow_network,
        "runtime_packages": list(runtime_packages),
        "secrets": dict(secrets or {}),
    }
    # Left out: the server's default, or with init_from the parent's base model.
    if guards is not None:
        if isinstance(guards, Guards):
            guards = guards.model_dump(exclude_unset=True, exclude_none=True)
        body["guards"] = dict(guards)
    if base_model is not None:
        body["base_model"] = base_model
    if init_from is not None:
        body["init_from"] = init_from.id if isinstance(init_from, Job) else init_from
    if init_from_optimizer:
        body["init_from_optimizer"] = True
    if validation_dataset is not None:
        body["validation_dataset_id"] = (
            validation_dataset.id if isinstance(validation_dataset, Dataset) else validation_dataset
        )
    if validation_split is not None:
        body["validation_split"] = validation_split
    if num_devices is not None:
        body["num_devices"] = num_devices
    if num_nodes is not None:
        body["num_nodes"] = num_nodes
    if engine is not None:
        body["engine"] = engine
    if method is not None:
        body["method"] = method
    if reward_module is not None:
        body["reward_module"] = reward_module.to_request()
    # Agent parts only when given: a job without them is the single-answer job it always was.
    if tools:
        body["tools"] = tools_request(tools)
    if environment is not None and environments:
        raise AgentSourceError("give environment (one) or environments (by name), not both")
    if environment is not None:
        body["environment"] = environment.to_request()
    if environments:
        body["environments"] = environments_request(environments)
    # Made once per call and reused by every retry, so a retried create cannot make two jobs.
    headers = {"Idempotency-Key": idempotency_key or new_idempotency_key()}
    return RequestOptions("POST", "/v1/jobs", json=body, headers=headers)


def _action_request(job_id: str, action: str) -> RequestOptions:
    return RequestOptions("POST", f"/v1/jobs/{job_id}/{action}")


class _WaitClock:
    def __init__(self, job_id: str, timeout: float | None) -> None:
        self.job_id = job_id
        self.deadline = None if timeout is None else time.monotonic() + timeout
        self.timeout = timeout

    def check(self, job: Job) -> None:
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise TimeoutError(
                f"job {self.job_id} is still {job.status.value} at step {job.steps_completed} "
                f"after {self.timeout} s"
            )


def _wait_is_over(job: Job, until_step: int | None) -> bool:
    return job.status.is_terminal or (until_step is not None and job.steps_completed >= until_step)


def _estimate_request(create_arguments: dict[str, Any]) -> RequestOptions:
    arguments = dict(CREATE_DEFAULTS)
    unknown = sorted(set(create_arguments) - set(arguments) - {"dataset"})
    if unknown:
        raise TypeError(f"estimate() got unexpected arguments: {', '.join(unknown)}")
    options = _create_request(**(arguments | create_arguments))
    # A dry run creates nothing: no idempotency key to keep.
    return RequestOptions("POST", "/v1/jobs/estimate", json=options.json)


# create()'s keyword arguments and their defaults, for estimate() (dataset is required).
CREATE_DEFAULTS: dict[str, Any] = {
    "reward_functions": None,
    "reward_module": None,
    "base_model": None,
    "method": None,
    "hyperparameters": None,
    "guards": None,
    "name": None,
    "allow_network": False,
    "runtime_packages": (),
    "secrets": None,
    "idempotency_key": None,
    "validation_dataset": None,
    "validation_split": None,
    "num_devices": None,
    "num_nodes": None,
    "engine": None,
    "tools": None,
    "environment": None,
    "environments": None,
    "init_from": None,
    "init_from_optimizer": False,
}


class Jobs(
    CheckpointMethods,
    ConfigMethods,
    StepMethods,
    CompletionMethods,
    EventMethods,
    ReportMethods,
    ExportMethods,
):
    """``client.jobs``: training jobs and everything they record."""

    def __init__(self, transport: SyncTransport) -> None:
        super().__init__(transport)
        self.exports = Exports(transport)

    def create(
        self,
        *,
        dataset: str | Dataset,
        reward_functions: RewardFunctionsInput | None = None,
        reward_module: RewardModule | None = None,
        base_model: str | None = None,
        method: JobMethod | None = None,
        hyperparameters: Hyperparameters | Mapping[str, Any] | None = None,
        guards: Guards | Mapping[str, Any] | None = None,
        name: str | None = None,
        allow_network: bool = False,
        runtime_packages: Sequence[str] = (),
        secrets: Mapping[str, str] | None = None,
        idempotency_key: str | None = None,
        validation_dataset: str | Dataset | None = None,
        validation_split: float | None = None,
        num_devices: int | None = None,
        num_nodes: int | None = None,
        engine: str | None = None,
        tools: Sequence[ToolLike] | None = None,
        environment: Environment | None = None,
        environments: Mapping[str, Environment] | None = None,
        init_from: str | Job | None = None,
        init_from_optimizer: bool = False,
    ) -> Job:
        """Start a GRPO job, or with ``method="sft"`` a supervised one.

        ``reward_functions`` maps a name to a Python function, a source string, or
        ``RewardFunction(fn_or_source, weight=...)``; a function that uses module-level
        helpers, constants or imports is sent with its file, and the server keeps what it
        uses. ``reward_module=RewardModule("rewards.py", {"name": weight})`` names the rewards
        of a whole file instead (or as well). An Idempotency-Key is always sent (a fresh
        one unless given), so retries after a lost response return the same job.
        ``secrets`` become environment variables of this job's reward functions only (e.g. a
        judge's API key): stored encrypted, never returned (``Job.secret_names`` lists them).
        ``validation_dataset`` (or ``validation_split``, a share of the training rows held
        out) gives prompts the adapter is scored on every ``eval_every`` steps and at the end
        (:meth:`evals`). ``num_devices`` (default 1) trains on that many devices of one
        worker, ``engine`` says how ('ddp', the default; 'deepspeed_zero2', 'deepspeed_zero3',
        or 'fsdp' on GPU workers: README, "Several GPUs in one job"); ``num_nodes`` (default
        1) spreads the job over that many workers (machines), ``num_devices`` on each; None:
        the server's default. ``guards`` (``rft.Guards`` or a mapping) sets the thresholds of
        the guards against reward hacking and ``pause_on``, the guards that pause the job;
        trips are in ``Job.guard_trips`` with their evidence.

        Agent jobs: ``tools`` lists the functions the model may call during generation, each
        a plain function (sent as its own source: it must be self-contained and defined with
        ``def`` at module level; lambdas and closures are refused) or
        ``rft.Tool.from_file(path, name)``. ``environment=rft.Environment.from_file(path,
        class_name, weight=1.0)`` gives each rollout an instance of that class (its public
        methods are tools, its ``get_reward()`` a reward); ``environments={name: ...}`` names
        several (a dataset's ``environment`` column picks one per row). ``max_turns`` and
        ``tool_timeout_s`` in ``hyperparameters`` bound a rollout and one tool call.

        ``init_from`` starts from the LoRA weights of one of your jobs: a ``Job`` or its id
        (its final adapter), or ``"job_…:checkpoint-N"`` (its checkpoint after step N).
        ``base_model`` and the LoRA shape (``lora_rank``, ``lora_alpha``,
        ``lora_target_modules``) are then the parent's unless given; ``base_model`` left out
        is otherwise the server's default ('rft-tiny'). ``init_from_optimizer=True`` (with a
        checkpoint) also starts the optimizer from that checkpoint's state.

        Supervised fine-tuning: ``method="sft"`` trains on the dataset's answers (rows of
        ``{"messages": [...]}`` ending with the assistant's message, or ``{"prompt": ...,
        "completion": ...}``) with no reward functions; ``hyperparameters`` take SFT's fields
        (``batch_size``, ``max_length``, the learning rate, LoRA, steps and checkpoints). Each
        step's ``loss`` and ``metrics`` (:meth:`steps`) trace it; its adapter can seed a GRPO
        job.
        """
        options = _create_request(
            dataset=dataset,
            reward_functions=reward_functions,
            reward_module=reward_module,
            base_model=base_model,
            method=method,
            hyperparameters=hyperparameters,
            guards=guards,
            name=name,
            allow_network=allow_network,
            runtime_packages=runtime_packages,
            secrets=secrets,
            idempotency_key=idempotency_key,
            validation_dataset=validation_dataset,
            validation_split=validation_split,
            num_devices=num_devices,
            num_nodes=num_nodes,
            engine=engine,
            tools=tools,
            environment=environment,
            environments=environments,
            init_from=init_from,
            init_from_optimizer=init_from_optimizer,
        )
        return Job.model_validate(self._transport.request(options).json())

    def estimate(self, **create_arguments: Any) -> CostEstimate:
        """A dry run of :meth:`create`'s cost (the same arguments): the job's expected tokens,
        step time and GPU-hours on the running workers that could take it, from throughput
        they measured; nothing is created. Each job also keeps the estimate it was created
        with (``Job.cost_estimate``)."""
        return CostEstimate.model_validate(
            self._transport.request(_estimate_request(create_arguments)).json()
        )

    def get(self, job_id: str, /) -> Job:
        return Job.model_validate(self._get_json(f"/v1/jobs/{job_id}"))

    def list(self, *, status: str | None = None, limit: int | None = None) -> PageIterator[Job]:
        """Every job (optionally of one status), newest first; ``limit`` is the page size."""
        params = {"status": status, "limit": limit}
        return get_api_list(self._transport, "/v1/jobs", page=Page[Job], params=params)

    def cancel(self, job_id: str, /) -> Job:
        options = _action_request(job_id, "cancel")
        return Job.model_validate(self._transport.request(options).json())

    def pause(self, job_id: str, /) -> Job:
        """Pause a running job: checkpoint at the next step boundary and free the worker.

        Returns the job as ``pausing``; it reads ``paused`` once the worker has saved the
        checkpoint and let go (a ``paused`` event names the step). ``resume`` or ``cancel``
        may come at any time: during ``pausing`` a resume calls the pause off.
        """
        options = _action_request(job_id, "pause")
        return Job.model_validate(self._transport.request(options).json())

    def resume(self, job_id: str, /) -> Job:
        """Resume a paused job: ``queued`` again, it continues from its checkpoint on any
        worker. A ``pausing`` job's pause is called off: it reads ``running`` again and its
        worker trains on."""
        options = _action_request(job_id, "resume")
        return Job.model_validate(self._transport.request(options).json())

    def wait(
        self,
        job_id: str,
        /,
        *,
        until_step: int | None = None,
        progress: bool = False,
        poll_interval: float = DEFAULT_POLL_INTERVAL_S,
        timeout: float | None = None,
    ) -> Job:
        """Poll until the job ends (or has recorded ``until_step`` steps); returns the job.

        ``pausing`` and ``paused`` are not ends: the wait goes on until the job is resumed
        and ends (or ``timeout``)."""
        clock = _WaitClock(job_id, timeout)
        display: JobProgress | None = job_progress() if progress else None
        try:
            while True:
                job = self.get(job_id)
                if display is not None:
                    display.show(job)
                if _wait_is_over(job, until_step):
                    return job
                clock.check(job)
                time.sleep(poll_interval)
        finally:
            if display is not None:
                display.close()


class AsyncJobs(
    AsyncCheckpointMethods,
    AsyncConfigMethods,
    AsyncStepMethods,
    AsyncCompletionMethods,
    AsyncEventMethods,
    AsyncReportMethods,
    AsyncExportMethods,
):
    """``client.jobs`` of the async client; see :class:`Jobs`."""

    def __init__(self, transport: AsyncTransport) -> None:
        super().__init__(transport)
        self.exports = AsyncExports(transport)

    async def create(
        self,
        *,
        dataset: str | Dataset,
        reward_functions: RewardFunctionsInput | None = None,
        reward_module: RewardModule | None = None,
        base_model: str | None = None,
        method: JobMethod | None = None,
        hyperparameters: Hyperparameters | Mapping[str, Any] | None = None,
        guards: Guards | Mapping[str, Any] | None = None,
        name: str | None = None,
        allow_network: bool = False,
        runtime_packages: Sequence[str] = (),
        secrets: Mapping[str, str] | None = None,
        idempotency_key: str | None = None,
        validation_dataset: str | Dataset | None = None,
        validation_split: float | None = None,
        num_devices: int | None = None,
        num_nodes: int | None = None,
        engine: str | None = None,
        tools: Sequence[ToolLike] | None = None,
        environment: Environment | None = None,
        environments: Mapping[str, Environment] | None = None,
        init_from: str | Job | None = None,
        init_from_optimizer: bool = False,
    ) -> Job:
        """See :meth:`Jobs.create`."""
        options = _create_request(
            dataset=dataset,
            reward_functions=reward_functions,
            reward_module=reward_module,
            base_model=base_model,
            method=method,
            hyperparameters=hyperparameters,
            guards=guards,
            name=name,
            allow_network=allow_network,
            runtime_packages=runtime_packages,
            secrets=secrets,
            idempotency_key=idempotency_key,
            validation_dataset=validation_dataset,
            validation_split=validation_split,
            num_devices=num_devices,
            num_nodes=num_nodes,
            engine=engine,
            tools=tools,
            environment=environment,
            environments=environments,
            init_from=init_from,
            init_from_optimizer=init_from_optimizer,
        )
        return Job.model_validate((await self._transport.request(options)).json())

    async def estimate(self, **create_arguments: Any) -> CostEstimate:
        """See :meth:`Jobs.estimate`."""
        response = await self._transport.request(_estimate_request(create_arguments))
        return CostEstimate.model_validate(response.json())

    async def get(self, job_id: str, /) -> Job:
        return Job.model_validate(await self._get_json(f"/v1/jobs/{job_id}"))

    def list(
        self, *, status: str | None = None, limit: int | None = None
    ) -> AsyncPageIterator[Job]:
        params = {"status": status, "limit": limit}
        return get_async_api_list(self._transport, "/v1/jobs", page=Page[Job], params=params)

    async def cancel(self, job_id: str, /) -> Job:
        options = _action_request(job_id, "cancel")
        return Job.model_validate((await self._transport.request(options)).json())

    async def pause(self, job_id: str, /) -> Job:
        """Pause a running job: ``pausing``, then ``paused`` once the worker has let go."""
        options = _action_request(job_id, "pause")
        return Job.model_validate((await self._transport.request(options)).json())

    async def resume(self, job_id: str, /) -> Job:
        """Resume a paused job (``queued``), or call off the pause of a ``pausing`` one."""
        options = _action_request(job_id, "resume")
        return Job.model_validate((await self._transport.request(options)).json())

    async def wait(
        self,
        job_id: str,
        /,
        *,
        until_step: int | None = None,
        progress: bool = False,
        poll_interval: float = DEFAULT_POLL_INTERVAL_S,
        timeout: float | None = None,
    ) -> Job:
        clock = _WaitClock(job_id, timeout)
        display: JobProgress | None = job_progress() if progress else None
        try:
            while True:
                job = await self.get(job_id)
                if display is not None:
                    display.show(job)
                if _wait_is_over(job, until_step):
                    return job
                clock.check(job)
                await asyncio.sleep(poll_interval)
        finally:
            if display is not None:
                display.close()
