"""The reward sandbox: ``ProcessSandbox``, a RewardSandbox on warm sandboxed child processes.

Each process is a ``SandboxWorker`` (sandbox/worker_process.py) running the reward child
(sandbox/child/reward_child.py). Each function scores each batch in its own request with its
own deadline, so a function that hangs or kills its process costs only its own scores: the
process is killed, started again, given the loaded functions again, and the other functions
carry on.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
import weakref
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from sandbox.api import (
    FunctionResult,
    RewardCodeError,
    RewardError,
    RewardErrorKind,
    RewardFunctionSpec,
    RewardSandbox,
    ScoringBatch,
)
from sandbox.child.framing import encode_frame, frame_from_body, to_json_compatible
from sandbox.inspection import find_reward_entry_point
from sandbox.isolation import SandboxUnavailableError
from sandbox.redaction import SecretMask
from sandbox.settings import SandboxSettings
from sandbox.worker_process import (
    SandboxWorker,
    WorkerFailure,
    WorkerHost,
    check_isolation,
)

logger = logging.getLogger(__name__)


def _kill_all(workers: list[SandboxWorker]) -> None:
    for worker in workers:
        worker.shut_down()


class ProcessSandbox(WorkerHost, RewardSandbox):
    """RewardSandbox backed by `settings.workers` warm child processes fed over pipes."""

    def __init__(self, settings: SandboxSettings) -> None:
        self.settings = settings
        check_isolation(settings, "reward code")
        self._workers = [
            SandboxWorker(settings, f"sandbox-{index}") for index in range(settings.workers)
        ]
        self._specs: list[RewardFunctionSpec] = []
        self._mask = SecretMask(settings.env)
        self._load_frame: bytes | None = None
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._closed = False
        # Children die with us in any case (PDEATHSIG); this also covers a plain interpreter exit.
        self._finalizer = weakref.finalize(self, _kill_all, self._workers)
        self._start_or_close(self._workers)

    @property
    def functions(self) -> list[RewardFunctionSpec]:
        return list(self._specs)

    def load(self, functions: Sequence[RewardFunctionSpec]) -> None:
        specs = list(functions)
        names = [spec.name for spec in specs]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise RewardCodeError(duplicates[0], "two reward functions share this name")
        entries = [find_reward_entry_point(spec.name, spec.source) for spec in specs]
        frame = encode_frame(
            {
                "op": "load",
                "timeout_s": self.settings.effective_load_timeout_s,
                "functions": [
                    {
                        "name": spec.name,
                        "source": spec.source,
                        "version": spec.version,
                        "entry": entry.function_name,
                        "form": entry.form.value,
                        "max_concurrency": spec.max_concurrency,
                        "sample_timeout_s": min(
                            spec.sample_timeout_s or self.settings.sample_timeout_s,
                            self.settings.call_timeout_s,
                        ),
                        "rate_limit_per_s": spec.rate_limit_per_s,
                    }
                    for spec, entry in zip(specs, entries, strict=True)
                ],
            }
        )
        with self._lock:
            self._check_open()
            for index, worker in enumerate(self._workers):
                try:
                    self._load_into(worker, frame, names)
                except RewardCodeError as error:
                    # Keep every worker on the same functions: roll the ones already done back.
                    for done in self._workers[:index]:
                        self._restart(done)
                    if self._mask:
                        raise RewardCodeError(
                            error.function_name, self._mask.text(error.message)
                        ) from None
                    raise
            self._specs = specs
            self._load_frame = frame

    def _load_into(self, worker: SandboxWorker, frame: bytes, names: list[str]) -> None:
        if not worker.alive:
            self._restart(worker)
        try:
            reply = worker.request(frame, self._hard_load_timeout_s())
        except WorkerFailure as failure:
            self._restart(worker)
            raise RewardCodeError(", ".join(names), f"loading failed: {failure.message}") from None
        if reply.get("stray_processes") is not False:
            # Module-level code left processes behind; the next use starts a clean child.
            worker.kill()
        if reply.get("ok") is True:
            if worker.alive:
                worker.loaded_body = frame
            return
        errors = reply.get("errors")
        if isinstance(errors, dict) and errors:
            name, detail = next(iter(errors.items()))
            raise RewardCodeError(str(name), f"loading failed:\n{detail}")
        raise RewardCodeError(", ".join(names), f"loading failed: {reply.get('sandbox_error')}")

    def score(self, batch: ScoringBatch) -> dict[str, FunctionResult]:
        count = len(batch.completions)
        if len(batch.prompts) != count or len(batch.examples) != count:
            raise ValueError(
                f"batch has {len(batch.prompts)} prompts, {count} completions and "
                f"{len(batch.examples)} examples; they must match"
            )
        with self._lock:
            self._check_open()
            specs = self._specs
            if not specs:
                return {}
            batch_body = json.dumps(
                {
                    "prompts": batch.prompts,
                    "completions": batch.completions,
                    "examples": batch.examples,
                    "step": batch.step,
                    **({"trajectories": batch.trajectories} if batch.trajectories else {}),
                },
                separators=(",", ":"),
                default=to_json_compatible,
            ).encode()
            frames = [self._score_frame(spec, batch_body) for spec in specs]
            workers = self._workers
            if len(workers) == 1 or len(specs) == 1:
                results = [
                    self._score_on(workers[0], spec, frame, count)
                    for spec, frame in zip(specs, frames, strict=True)
                ]
            else:
                results = self._score_in_parallel(specs, frames, count)
        return {result.name: self._mask.result(result) for result in results}

    def _score_in_parallel(
        self, specs: list[RewardFunctionSpec], frames: list[bytes], count: int
    ) -> list[FunctionResult]:
        workers = self._workers
        if self._pool is None:
            self._pool = ThreadPoolExecutor(len(workers), thread_name_prefix="sandbox")
        shares = [list(range(index, len(specs), len(workers))) for index in range(len(workers))]

        def run_share(
            worker: SandboxWorker, indices: list[int]
        ) -> list[tuple[int, FunctionResult]]:
            return [(i, self._score_on(worker, specs[i], frames[i], count)) for i in indices]

        futures = [
            self._pool.submit(run_share, worker, share)
            for worker, share in zip(workers, shares, strict=True)
            if share
        ]
        ordered: list[FunctionResult | None] = [None] * len(specs)
        for future in futures:
            for index, result in future.result():
                ordered[index] = result
        return [result for result in ordered if result is not None]

    def _score_frame(self, spec: RewardFunctionSpec, batch_body: bytes) -> bytes:
        # The batch is encoded once and spliced into each function's request.
        head = json.dumps(
            {
                "op": "score",
                "function": spec.name,
                "timeout_s": self.settings.call_timeout_s,
                "log_limit": self.settings.log_limit_bytes,
            },
            separators=(",", ":"),
        ).encode()
        return frame_from_body(head[:-1] + b',"batch":' + batch_body + b"}")

    def _score_on(
        self, worker: SandboxWorker, spec: RewardFunctionSpec, frame: bytes, count: int
    ) -> FunctionResult:
        started = time.monotonic()

        def failed(kind: RewardErrorKind, message: str) -> FunctionResult:
            return FunctionResult(
                name=spec.name,
                version=spec.version,
                scores=[None] * count,
                errors=[RewardError(kind=kind, message=message)],
                duration_s=time.monotonic() - started,
            )

        if not worker.alive or worker.loaded_body != self._load_frame:
            problem = self._restart(worker)
            if problem is not None:
                return failed(RewardErrorKind.SANDBOX, problem)
        try:
            reply = worker.request(frame, self._hard_timeout_s())
        except WorkerFailure as failure:
            self._restart(worker)
            return failed(failure.kind, failure.message)
        try:
            result = _parse_score_reply(spec, reply, count)
        except ValueError as error:
            self._restart(worker)
            return failed(RewardErrorKind.SANDBOX, f"the sandbox process sent a bad reply: {error}")
        if worker.worn_out(reply) or reply.get("stray_processes") is not False:
            self._restart(worker)
        return result

    def _restart(self, worker: SandboxWorker) -> str | None:
        """Replace the child and load the current functions; say what went wrong, if anything."""
        if self._closed:
            return "the sandbox is closed"
        try:
            worker.start()
        except SandboxUnavailableError as error:
            logger.error("%s could not restart: %s", worker.label, error)
            return f"the sandbox could not restart: {error}"
        if self._load_frame is None:
            return None
        try:
            reply = worker.request(self._load_frame, self._hard_load_timeout_s())
        except WorkerFailure as failure:
            return f"reloading the functions after a restart failed: {failure.message}"
        if reply.get("ok") is not True:
            return f"reloading the functions after a restart failed: {reply}"
        worker.loaded_body = self._load_frame
        return None

    def _hard_timeout_s(self) -> float:
        return self.settings.call_timeout_s + self.settings.kill_grace_s

    def _hard_load_timeout_s(self) -> float:
        return self.settings.effective_load_timeout_s + self.settings.kill_grace_s

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this sandbox is closed")

    def close(self) -> None:
        self._closed = True
        _kill_all(self._workers)
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None
        self._finalizer.detach()


def create_sandbox(settings: SandboxSettings) -> RewardSandbox:
    """The sandbox for `settings`; raises SandboxUnavailableError when bwrap cannot be used."""
    return ProcessSandbox(settings)


def _parse_score_reply(
    spec: RewardFunctionSpec, reply: dict[str, Any], count: int
) -> FunctionResult:
    """Turn the child's reply into a FunctionResult, trusting nothing in it: user code ran there."""
    if reply.get("ok") is not True:
        raise ValueError(str(reply.get("sandbox_error", "no scores"))[:2000])
    raw_scores = reply.get("scores")
    if not isinstance(raw_scores, list) or len(raw_scores) != count:
        raise ValueError("scores missing or of the wrong length")
    scores: list[float | None] = []
    for value in raw_scores:
        if value is None:
            scores.append(None)
        elif (
            isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        ):
            scores.append(float(value))
        else:
            raise ValueError(f"score {value!r} is not a finite number")
    errors = [_parse_error(raw, count) for raw in _list_of_dicts(reply.get("errors"))]
    logs = reply.get("logs")
    duration = reply.get("duration_s")
    return FunctionResult(
        name=spec.name,
        version=spec.version,
        scores=scores,
        errors=errors,
        logs=logs if isinstance(logs, str) else "",
        logs_truncated=reply.get("logs_truncated") is True,
        duration_s=float(duration) if isinstance(duration, int | float) else 0.0,
    )


def _list_of_dicts(value: object) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        raise ValueError("errors is not a list of objects")
    return value


def _parse_error(raw: dict[str, Any], count: int) -> RewardError:
    kind = RewardErrorKind(str(raw.get("kind")))
    index = raw.get("sample_index")
    if index is not None and (not isinstance(index, int) or not 0 <= index < count):
        raise ValueError(f"sample_index {index!r} out of range")
    trace = raw.get("traceback")
    return RewardError(
        kind=kind,
        message=str(raw.get("message", "")),
        traceback=trace if isinstance(trace, str) else None,
        sample_index=index,
    )
