from __future__ import annotations

import asyncio
import builtins
import json
import os
import time
import warnings
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TypeAlias, overload

import httpx

from rft.agents import Environment, ToolLike, environments_request, tools_request
from rft.errors import AgentSourceError, APIConnectionError, APIStatusError
from rft.models import (
    CheckpointList,
    Completion,
    ConfigUpdate,
    CostEstimate,
    Dataset,
    DryRunResult,
    Evaluation,
    Export,
    Guards,
    Hyperparameters,
    Job,
    JobConfig,
    JobEvent,
    JobMethod,
    Page,
    RewardError,
    RewardFunctionLog,
    RewardFunctionsInput,
    RewardModule,
    Step,
    reward_functions_request,
)
from rft.pagination import (
    AsyncPageIterator,
    PageIterator,
    get_api_list,
    get_async_api_list,
)
from rft.progress import JobProgress, job_progress
from rft.resources.adapter_archive import (
    archive_name,
    archive_request,
    save_archive,
    save_archive_async,
)
from rft.resources.exports import (
    DEFAULT_EXPORT_POLL_INTERVAL_S,
    AsyncExports,
    Exports,
    succeeded,
)
from rft.resources.job_report import report_request, save_report
from rft.sse import ServerSentEvent, SSEDecoder
from rft.transport import (
    AsyncTransport,
    RequestOptions,
    SyncTransport,
    new_idempotency_key,
    retry_delay,
)

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


def _config_from_response(response: httpx.Response) -> JobConfig:
    config = JobConfig.model_validate(response.json())
    config.etag = response.headers.get("ETag")
    return config


def _update_config_request(
    job_id: str,
    config: JobConfig | Mapping[str, Any],
    *,
    dry_run: bool,
    check_version: bool,
    secrets: Mapping[str, str | None] | None,
) -> RequestOptions:
    if not isinstance(config, JobConfig):
        config = JobConfig.model_validate(config)
    headers: dict[str, str] = {}
    if check_version:
        if config.etag:
            headers["If-Match"] = config.etag
        elif config.version is not None:
            headers["If-Match"] = f'"{config.version}"'
        # else: no version known; the server requires one (PreconditionRequiredError).
    else:
        headers["If-Match"] = "*"  # whatever version is current
    return RequestOptions(
        "PUT",
        f"/v1/jobs/{job_id}/config",
        params={"dry_run": "true"} if dry_run else None,
        json={**config.to_update_request(), **({"secrets": dict(secrets)} if secrets else {})},
        headers=headers,
    )


def _update_result(response: httpx.Response, dry_run: bool) -> ConfigUpdate | DryRunResult:
    if dry_run:
        return DryRunResult.model_validate(response.json())
    return ConfigUpdate.model_validate(response.json())


def _action_request(job_id: str, action: str) -> RequestOptions:
    return RequestOptions("POST", f"/v1/jobs/{job_id}/{action}")


def _checkpoint_archive_path(job_id: str, step: int) -> str:
    return f"/v1/jobs/{job_id}/checkpoints/{step}/adapter.tar.gz"


def _adapter_archive_path(job_id: str) -> str:
    return f"/v1/jobs/{job_id}/adapter.tar.gz"


def _merged_name(job_id: str, checkpoint: int | None) -> str:
    return f"{job_id}-merged" if checkpoint is None else f"{job_id}-step-{checkpoint}-merged"


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


StreamItem: TypeAlias = Step | JobEvent
StreamItemWithJob: TypeAlias = Step | JobEvent | Job


def _warn_poll_interval(poll_interval: float | None) -> None:
    if poll_interval is not None:
        warnings.warn(
            "stream(poll_interval=...) is deprecated and ignored: the stream is pushed by the "
            "server",
            DeprecationWarning,
            stacklevel=3,
        )


class _JobStream:
    """What the sync and async streams share: the request, the cursor, the retry budget.

    The cursor is the ``id`` of the last complete message; every (re)connection sends it as
    Last-Event-ID, so the server resumes both the steps and the events right after it.
    """

    def __init__(self, job_id: str, *, include_job_snapshots: bool, max_retries: int) -> None:
        self.job_id = job_id
        self.include_job_snapshots = include_job_snapshots
        self.max_retries = max_retries
        self.cursor: str | None = None
        self.failures = 0  # consecutive, since the cursor last moved
        self.ended = False

    def request(self) -> RequestOptions:
        headers = {"Accept": "text/event-stream", "Cache-Control": "no-cache"}
        if self.cursor:
            headers["Last-Event-ID"] = self.cursor
        return RequestOptions("GET", f"/v1/jobs/{self.job_id}/events", headers=headers)

    def receive(self, message: ServerSentEvent) -> StreamItemWithJob | None:
        """The item a message carries (None for those not yielded); advances the cursor."""
        if message.id and message.id != self.cursor:
            # New information: the failures before it were not consecutive with the next.
            self.cursor = message.id
            self.failures = 0
        if message.event == "end":
            self.ended = True
            return None
        if message.event == "step":
            return Step.model_validate_json(message.data)
        if message.event == "job":
            # A snapshot, sent again on every reconnection: not a log entry.
            return Job.model_validate_json(message.data) if self.include_job_snapshots else None
        payload = json.loads(message.data)
        if isinstance(payload, dict) and "id" in payload and "kind" in payload:
            return JobEvent.model_validate(payload)
        return None  # a message type this client does not know: skipped

    def disconnected(self, decoder: SSEDecoder) -> None:
        if decoder.last_event_id:
            self.cursor = decoder.last_event_id  # an id-only block also moves the cursor

    def early_end(self) -> APIConnectionError:
        return APIConnectionError(
            f"the event stream of job {self.job_id} closed before its end message"
        )

    def backoff(self, error: APIConnectionError | APIStatusError) -> float:
        """Seconds to wait before reconnecting; raises ``error`` when it is not worth it."""
        response = error.response if isinstance(error, APIStatusError) else None
        if response is not None and response.status_code < 500 and response.status_code != 429:
            raise error  # the request itself is wrong (auth, unknown job, bad cursor)
        if self.failures >= self.max_retries:
            raise error
        delay = retry_delay(self.failures, response)
        self.failures += 1
        return delay


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


class Jobs:
    def __init__(self, transport: SyncTransport) -> None:
        self._transport = transport
        self.exports = Exports(transport)

    def _get_json(self, path: str, **params: Any) -> Any:
        return self._transport.request(RequestOptions("GET", path, params=params)).json()

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

    def checkpoints(self, job_id: str, /) -> CheckpointList:
        """The job's saved checkpoints, oldest first, and whether a final adapter exists."""
        return CheckpointList.model_validate(self._get_json(f"/v1/jobs/{job_id}/checkpoints"))

    def download_checkpoint(
        self,
        job_id: str,
        step: int,
        /,
        destination: str | os.PathLike[str],
        *,
        extract: bool = True,
    ) -> Path:
        """Save the LoRA adapter of the checkpoint at ``step`` under the ``destination`` folder.

        Streamed to disk. Returns the unpacked PEFT directory (load it with
        ``PeftModel.from_pretrained``), or with ``extract=False`` the ``.tar.gz`` itself.
        """
        return self._download(
            _checkpoint_archive_path(job_id, step), f"{job_id}-step-{step}", destination, extract
        )

    def download_adapter(
        self, job_id: str, /, destination: str | os.PathLike[str], *, extract: bool = True
    ) -> Path:
        """Save the final LoRA adapter of a finished job; see :meth:`download_checkpoint`."""
        return self._download(
            _adapter_archive_path(job_id), f"{job_id}-adapter", destination, extract
        )

    def _download(
        self, path: str, fallback_name: str, destination: str | os.PathLike[str], extract: bool
    ) -> Path:
        with self._transport.stream(archive_request(path)) as response:
            name = archive_name(response.response.headers.get("Content-Disposition"), fallback_name)
            return save_archive(response.iter_bytes(), destination, name, extract=extract)

    def download_merged(
        self,
        job_id: str,
        /,
        destination: str | os.PathLike[str],
        *,
        checkpoint: int | None = None,
        dtype: str = "auto",
        extract: bool = True,
        poll_interval: float = DEFAULT_EXPORT_POLL_INTERVAL_S,
        timeout: float | None = None,
        on_update: Callable[[Export], None] | None = None,
    ) -> Path:
        """Save the base model with the final adapter (or the checkpoint at step
        ``checkpoint``) merged into it under ``destination``: a Hugging Face model folder in
        safetensors that ``AutoModelForCausalLM.from_pretrained`` loads.

        A worker builds it first (once per adapter and ``dtype``: "auto" keeps the base
        model's, or "float32", "bfloat16", "float16"); this waits for that, then streams the
        archive to disk. Returns the unpacked folder, or with ``extract=False`` the
        ``.tar.gz``. ``on_update`` sees the export (stage, progress) at each poll. Raises
        ExportFailedError when the build fails, TimeoutError after ``timeout`` seconds.
        """
        export = self.exports.create(job_id, kind="merged", checkpoint=checkpoint, dtype=dtype)
        export = succeeded(
            self.exports.wait(
                job_id,
                export.id,
                poll_interval=poll_interval,
                timeout=timeout,
                on_update=on_update,
            )
        )
        assert export.download_path is not None
        name = _merged_name(job_id, checkpoint)
        return self._download(export.download_path, name, destination, extract)

    def push_to_hub(
        self,
        job_id: str,
        repo_id: str,
        /,
        *,
        token: str | None = None,
        token_secret: str | None = None,
        merged: bool = False,
        checkpoint: int | None = None,
        dtype: str = "auto",
        private: bool = True,
        wait: bool = True,
        poll_interval: float = DEFAULT_EXPORT_POLL_INTERVAL_S,
        timeout: float | None = None,
        on_update: Callable[[Export], None] | None = None,
    ) -> Export:
        """Push the job's adapter (or with ``merged=True`` the base model with the adapter
        merged in) to the Hugging Face hub repository ``repo_id``, created (``private``) when
        missing. The token is ``token`` (sent once; the server keeps it encrypted until the
        push ends, then erases it) or the job secret named ``token_secret``.

        Waits for the push unless ``wait=False``; returns the export (``hub.commit_url``).
        Raises ExportFailedError when it fails (a refused token: the hub's 401).
        """
        export = self.exports.create(
            job_id,
            kind="merged" if merged else "adapter",
            checkpoint=checkpoint,
            dtype=dtype,
            hub_repo=repo_id,
            token=token,
            token_secret=token_secret,
            private=private,
        )
        if not wait:
            return export
        return succeeded(
            self.exports.wait(
                job_id,
                export.id,
                poll_interval=poll_interval,
                timeout=timeout,
                on_update=on_update,
            )
        )

    def steps(self, job_id: str, /, *, after_step: int = 0) -> builtins.list[Step]:
        """The recorded steps after ``after_step``, in order."""
        return get_api_list(
            self._transport,
            f"/v1/jobs/{job_id}/steps",
            page=Page[Step],
            cursor_param="after_step",
            start=str(after_step),
        ).to_list()

    def evals(self, job_id: str, /, *, after_step: int = 0) -> builtins.list[Evaluation]:
        """The validation results after ``after_step``, in step order (the eval curve)."""
        return get_api_list(
            self._transport,
            f"/v1/jobs/{job_id}/evals",
            page=Page[Evaluation],
            cursor_param="after_step",
            start=str(after_step),
        ).to_list()

    def completions(
        self, job_id: str, /, *, step: int | None = None, limit: int | None = None
    ) -> PageIterator[Completion]:
        """Recorded completions (of one step, if given) in order; ``limit`` is the page size."""
        params = {"step": step, "limit": limit}
        return get_api_list(
            self._transport, f"/v1/jobs/{job_id}/completions", page=Page[Completion], params=params
        )

    def events(self, job_id: str, /, *, after: int = 0) -> PageIterator[JobEvent]:
        return get_api_list(
            self._transport,
            f"/v1/jobs/{job_id}/events/history",
            page=Page[JobEvent],
            start=str(after),
        )

    def logs(
        self, job_id: str, /, *, step: int | None = None, function: str | None = None
    ) -> PageIterator[RewardFunctionLog]:
        """What reward functions printed, per step and function."""
        params = {"step": step, "function": function}
        return get_api_list(
            self._transport, f"/v1/jobs/{job_id}/logs", page=Page[RewardFunctionLog], params=params
        )

    def reward_errors(
        self, job_id: str, /, *, step: int | None = None, function: str | None = None
    ) -> PageIterator[RewardError]:
        """Reward functions' failures on single samples (exceptions, timeouts, bad returns)."""
        params = {"step": step, "function": function}
        return get_api_list(
            self._transport,
            f"/v1/jobs/{job_id}/reward-errors",
            page=Page[RewardError],
            params=params,
        )

    def get_config(self, job_id: str, /) -> JobConfig:
        """The job's live config; edit it and pass it to :meth:`update_config`."""
        options = RequestOptions("GET", f"/v1/jobs/{job_id}/config")
        return _config_from_response(self._transport.request(options))

    def report(
        self,
        job_id: str,
        /,
        *,
        steps: Sequence[int] | None = None,
        path: str | os.PathLike[str] | None = None,
    ) -> str:
        """The job's report: one self-contained HTML page (curves, config history with diffs,
        warnings and guard trips, the best and worst completions of ``steps`` (default: the
        first and the last step), lineage, exports) that opens offline. With ``path``, it is
        also written there."""
        page = self._transport.request(report_request(job_id, steps)).text
        if path is not None:
            save_report(page, path)
        return page

    def config_versions(self, job_id: str, /) -> builtins.list[JobConfig]:
        """Every config the job has had, oldest first."""
        data = self._get_json(f"/v1/jobs/{job_id}/config/versions")
        return [JobConfig.model_validate(item) for item in data]

    @overload
    def update_config(
        self,
        job_id: str,
        config: JobConfig | Mapping[str, Any],
        /,
        *,
        dry_run: Literal[False] = False,
        check_version: bool = True,
        secrets: Mapping[str, str | None] | None = None,
    ) -> ConfigUpdate: ...

    @overload
    def update_config(
        self,
        job_id: str,
        config: JobConfig | Mapping[str, Any],
        /,
        *,
        dry_run: Literal[True],
        check_version: bool = True,
        secrets: Mapping[str, str | None] | None = None,
    ) -> DryRunResult: ...

    def update_config(
        self,
        job_id: str,
        config: JobConfig | Mapping[str, Any],
        /,
        *,
        dry_run: bool = False,
        check_version: bool = True,
        secrets: Mapping[str, str | None] | None = None,
    ) -> ConfigUpdate | DryRunResult:
        """Change reward functions, weights, sampling, tools or environments of a running job.

        Agent jobs: ``config.tools = {"search": search}`` (functions, ``rft.Tool`` or source)
        and ``config.environments = {"calc": rft.Environment.from_file(...)}`` replace their
        code from the next step; a config read by :meth:`get_config` sends back the ones it
        holds, so a change to the rewards keeps them.

        With ``check_version`` (the default) a config read by :meth:`get_config` is sent with
        If-Match, so a change made by someone else in between raises PreconditionFailedError
        instead of being overwritten; the server requires If-Match, so a config with no
        version raises PreconditionRequiredError. ``check_version=False`` replaces whatever
        version is current (If-Match: *). ``dry_run=True`` rescores the last recorded step with
        the new functions and changes nothing.

        ``secrets`` rotates the job's secrets from the same step: a value sets or replaces
        one, ``None`` removes it, names not given keep their values (never returned: the
        result's config lists ``secret_names``).
        """
        options = _update_config_request(
            job_id, config, dry_run=dry_run, check_version=check_version, secrets=secrets
        )
        return _update_result(self._transport.request(options), dry_run)

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

    @overload
    def stream(
        self,
        job_id: str,
        /,
        *,
        include_job_snapshots: Literal[False] = False,
        poll_interval: float | None = None,
    ) -> Iterator[StreamItem]: ...

    @overload
    def stream(
        self,
        job_id: str,
        /,
        *,
        include_job_snapshots: bool,
        poll_interval: float | None = None,
    ) -> Iterator[StreamItemWithJob]: ...

    def stream(
        self,
        job_id: str,
        /,
        *,
        include_job_snapshots: bool = False,
        poll_interval: float | None = None,
    ) -> Iterator[StreamItemWithJob]:
        """Yield the job's steps and events, from its start, live, until the job ends.

        Reads ``GET /v1/jobs/{job_id}/events`` (Server-Sent Events). Steps and events arrive
        in the order they were recorded; with ``include_job_snapshots`` the job itself is
        yielded too, on connecting and whenever its status, step count or config versions
        change (again after a reconnection, being a snapshot). A dropped connection, a
        timeout or a 5xx is answered by reconnecting with backoff and Last-Event-ID, so no
        step or event is repeated or lost; more than ``max_retries`` failures in a row
        without news raise. The iterator stops after the server's ``end`` message.

        A step is yielded again only when the job resumed from a checkpoint (a ``resumed``
        event) and re-ran it: the new one replaces the old.

        ``poll_interval`` is deprecated and ignored (the server pushes).
        """
        _warn_poll_interval(poll_interval)
        state = _JobStream(
            job_id,
            include_job_snapshots=include_job_snapshots,
            max_retries=self._transport.max_retries,
        )
        return self._follow(state)

    def _follow(self, state: _JobStream) -> Iterator[StreamItemWithJob]:
        while True:
            decoder = SSEDecoder()
            error: APIConnectionError | APIStatusError
            try:
                with self._transport.stream(state.request()) as response:
                    for chunk in response.iter_bytes():
                        for message in decoder.feed(chunk):
                            item = state.receive(message)
                            if item is not None:
                                yield item
                            if state.ended:
                                return
                error = state.early_end()
            except (APIConnectionError, APIStatusError) as caught:
                error = caught
            finally:
                state.disconnected(decoder)
            time.sleep(state.backoff(error))


class AsyncJobs:
    def __init__(self, transport: AsyncTransport) -> None:
        self._transport = transport
        self.exports = AsyncExports(transport)

    async def _get_json(self, path: str, **params: Any) -> Any:
        return (await self._transport.request(RequestOptions("GET", path, params=params))).json()

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

    async def checkpoints(self, job_id: str, /) -> CheckpointList:
        data = await self._get_json(f"/v1/jobs/{job_id}/checkpoints")
        return CheckpointList.model_validate(data)

    async def download_checkpoint(
        self,
        job_id: str,
        step: int,
        /,
        destination: str | os.PathLike[str],
        *,
        extract: bool = True,
    ) -> Path:
        """See :meth:`Jobs.download_checkpoint`."""
        return await self._download(
            _checkpoint_archive_path(job_id, step), f"{job_id}-step-{step}", destination, extract
        )

    async def download_adapter(
        self, job_id: str, /, destination: str | os.PathLike[str], *, extract: bool = True
    ) -> Path:
        """See :meth:`Jobs.download_adapter`."""
        return await self._download(
            _adapter_archive_path(job_id), f"{job_id}-adapter", destination, extract
        )

    async def _download(
        self, path: str, fallback_name: str, destination: str | os.PathLike[str], extract: bool
    ) -> Path:
        async with self._transport.stream(archive_request(path)) as response:
            name = archive_name(response.response.headers.get("Content-Disposition"), fallback_name)
            return await save_archive_async(
                response.aiter_bytes(), destination, name, extract=extract
            )

    async def download_merged(
        self,
        job_id: str,
        /,
        destination: str | os.PathLike[str],
        *,
        checkpoint: int | None = None,
        dtype: str = "auto",
        extract: bool = True,
        poll_interval: float = DEFAULT_EXPORT_POLL_INTERVAL_S,
        timeout: float | None = None,
        on_update: Callable[[Export], None] | None = None,
    ) -> Path:
        """See :meth:`Jobs.download_merged`."""
        export = await self.exports.create(
            job_id, kind="merged", checkpoint=checkpoint, dtype=dtype
        )
        export = succeeded(
            await self.exports.wait(
                job_id,
                export.id,
                poll_interval=poll_interval,
                timeout=timeout,
                on_update=on_update,
            )
        )
        assert export.download_path is not None
        return await self._download(
            export.download_path, _merged_name(job_id, checkpoint), destination, extract
        )

    async def push_to_hub(
        self,
        job_id: str,
        repo_id: str,
        /,
        *,
        token: str | None = None,
        token_secret: str | None = None,
        merged: bool = False,
        checkpoint: int | None = None,
        dtype: str = "auto",
        private: bool = True,
        wait: bool = True,
        poll_interval: float = DEFAULT_EXPORT_POLL_INTERVAL_S,
        timeout: float | None = None,
        on_update: Callable[[Export], None] | None = None,
    ) -> Export:
        """See :meth:`Jobs.push_to_hub`."""
        export = await self.exports.create(
            job_id,
            kind="merged" if merged else "adapter",
            checkpoint=checkpoint,
            dtype=dtype,
            hub_repo=repo_id,
            token=token,
            token_secret=token_secret,
            private=private,
        )
        if not wait:
            return export
        return succeeded(
            await self.exports.wait(
                job_id,
                export.id,
                poll_interval=poll_interval,
                timeout=timeout,
                on_update=on_update,
            )
        )

    async def steps(self, job_id: str, /, *, after_step: int = 0) -> builtins.list[Step]:
        return await get_async_api_list(
            self._transport,
            f"/v1/jobs/{job_id}/steps",
            page=Page[Step],
            cursor_param="after_step",
            start=str(after_step),
        ).to_list()

    async def evals(self, job_id: str, /, *, after_step: int = 0) -> builtins.list[Evaluation]:
        """See :meth:`Jobs.evals`."""
        return await get_async_api_list(
            self._transport,
            f"/v1/jobs/{job_id}/evals",
            page=Page[Evaluation],
            cursor_param="after_step",
            start=str(after_step),
        ).to_list()

    def completions(
        self, job_id: str, /, *, step: int | None = None, limit: int | None = None
    ) -> AsyncPageIterator[Completion]:
        params = {"step": step, "limit": limit}
        return get_async_api_list(
            self._transport, f"/v1/jobs/{job_id}/completions", page=Page[Completion], params=params
        )

    def events(self, job_id: str, /, *, after: int = 0) -> AsyncPageIterator[JobEvent]:
        return get_async_api_list(
            self._transport,
            f"/v1/jobs/{job_id}/events/history",
            page=Page[JobEvent],
            start=str(after),
        )

    def logs(
        self, job_id: str, /, *, step: int | None = None, function: str | None = None
    ) -> AsyncPageIterator[RewardFunctionLog]:
        params = {"step": step, "function": function}
        return get_async_api_list(
            self._transport, f"/v1/jobs/{job_id}/logs", page=Page[RewardFunctionLog], params=params
        )

    def reward_errors(
        self, job_id: str, /, *, step: int | None = None, function: str | None = None
    ) -> AsyncPageIterator[RewardError]:
        params = {"step": step, "function": function}
        return get_async_api_list(
            self._transport,
            f"/v1/jobs/{job_id}/reward-errors",
            page=Page[RewardError],
            params=params,
        )

    async def get_config(self, job_id: str, /) -> JobConfig:
        options = RequestOptions("GET", f"/v1/jobs/{job_id}/config")
        return _config_from_response(await self._transport.request(options))

    async def report(
        self,
        job_id: str,
        /,
        *,
        steps: Sequence[int] | None = None,
        path: str | os.PathLike[str] | None = None,
    ) -> str:
        page = (await self._transport.request(report_request(job_id, steps))).text
        if path is not None:
            save_report(page, path)
        return page

    async def config_versions(self, job_id: str, /) -> builtins.list[JobConfig]:
        data = await self._get_json(f"/v1/jobs/{job_id}/config/versions")
        return [JobConfig.model_validate(item) for item in data]

    @overload
    async def update_config(
        self,
        job_id: str,
        config: JobConfig | Mapping[str, Any],
        /,
        *,
        dry_run: Literal[False] = False,
        check_version: bool = True,
        secrets: Mapping[str, str | None] | None = None,
    ) -> ConfigUpdate: ...

    @overload
    async def update_config(
        self,
        job_id: str,
        config: JobConfig | Mapping[str, Any],
        /,
        *,
        dry_run: Literal[True],
        check_version: bool = True,
        secrets: Mapping[str, str | None] | None = None,
    ) -> DryRunResult: ...

    async def update_config(
        self,
        job_id: str,
        config: JobConfig | Mapping[str, Any],
        /,
        *,
        dry_run: bool = False,
        check_version: bool = True,
        secrets: Mapping[str, str | None] | None = None,
    ) -> ConfigUpdate | DryRunResult:
        options = _update_config_request(
            job_id, config, dry_run=dry_run, check_version=check_version, secrets=secrets
        )
        return _update_result(await self._transport.request(options), dry_run)

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

    @overload
    def stream(
        self,
        job_id: str,
        /,
        *,
        include_job_snapshots: Literal[False] = False,
        poll_interval: float | None = None,
    ) -> AsyncIterator[StreamItem]: ...

    @overload
    def stream(
        self,
        job_id: str,
        /,
        *,
        include_job_snapshots: bool,
        poll_interval: float | None = None,
    ) -> AsyncIterator[StreamItemWithJob]: ...

    def stream(
        self,
        job_id: str,
        /,
        *,
        include_job_snapshots: bool = False,
        poll_interval: float | None = None,
    ) -> AsyncIterator[StreamItemWithJob]:
        """``async for`` the job's steps and events until it ends; see :meth:`Jobs.stream`."""
        _warn_poll_interval(poll_interval)
        state = _JobStream(
            job_id,
            include_job_snapshots=include_job_snapshots,
            max_retries=self._transport.max_retries,
        )
        return self._follow(state)

    async def _follow(self, state: _JobStream) -> AsyncIterator[StreamItemWithJob]:
        while True:
            decoder = SSEDecoder()
            error: APIConnectionError | APIStatusError
            try:
                async with self._transport.stream(state.request()) as response:
                    async for chunk in response.aiter_bytes():
                        for message in decoder.feed(chunk):
                            item = state.receive(message)
                            if item is not None:
                                yield item
                            if state.ended:
                                return
                error = state.early_end()
            except (APIConnectionError, APIStatusError) as caught:
                error = caught
            finally:
                state.disconnected(decoder)
            await asyncio.sleep(state.backoff(error))
