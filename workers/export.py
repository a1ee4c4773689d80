"""Builds one export from its id: the plain function behind the Celery task.

The worker takes the export (service.exports.ownership.take), fetches the adapter from the
artifact store and then, by kind:

- merged: runs the merge in a child process (workers.training.merge: load the base model in
  its dtype, apply the adapter, merge_and_unload, save_pretrained in safetensors with the
  tokenizer), so a model too large for this machine's memory fails the export, not the worker;
- adapter: copies the adapter's files, its config naming the job's base model.

A merged archive is packed (.tar.gz, RFT_EXPORT_COMPRESS_LEVEL: weights barely compress) beside
the job's artifacts and kept in the artifact store; a hub push creates the repository when missing
and uploads the folder in one commit with the user's token (never logged, never stored in
clear, erased from the row when the export ends). Each stage is reported on the export's row
with its share done; a heartbeat keeps the lease, as for training jobs.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from service.artifacts.service import copy_adapter
from service.artifacts.storage import S3_SCHEME, ArtifactStore, artifact_store, fetch_for_reading
from service.base_models.built_in.tiny_model import resolve_base_model
from service.exports import ownership
from service.exports.ownership import ExportWork
from service.exports.service import archive_name
from service.exports.status import ExportStage
from service.leases import HeldBy
from service.settings import Settings, get_settings
from workers.database import in_transaction
from workers.failures import ExportFailure, describe_failure
from workers.identity import WORKER_ID
from workers.lease import ExportHeartbeat

logger = logging.getLogger(__name__)

HELD = HeldBy(WORKER_ID)
# The share of the whole export done when each stage starts (the archive's own share grows
# with its bytes): what a reader of the export's progress sees.
STAGE_START: dict[str, dict[ExportStage, float]] = {
    "archive": {
        ExportStage.LOADING: 0.0,
        ExportStage.MERGING: 0.35,
        ExportStage.SAVING: 0.45,
        ExportStage.ARCHIVING: 0.65,
        ExportStage.STORING: 0.95,
    },
    "hub": {
        ExportStage.LOADING: 0.0,
        ExportStage.MERGING: 0.35,
        ExportStage.SAVING: 0.45,
        ExportStage.UPLOADING: 0.65,
    },
    "adapter": {ExportStage.UPLOADING: 0.0},
}
MERGE_STDERR_TAIL_CHARS = 1500


class ExportLost(RuntimeError):
    """The export is not this worker's any more (the reaper gave it to another one)."""


@dataclass(frozen=True)
class Built:
    archive_uri: str | None = None
    size_bytes: int | None = None
    hub_commit_url: str | None = None


class Progress:
    """Reports stages and shares done on the export's row; raises ExportLost once the worker
    no longer holds it (whatever it builds then is nobody's)."""

    def __init__(self, export_id: str, plan: dict[ExportStage, float]) -> None:
        self.export_id = export_id
        self.plan = plan
        self._reported = -1.0

    def stage(self, stage: ExportStage, share: float = 0.0) -> None:
        """``stage`` is on, ``share`` (0-1) of it done."""
        stages = list(self.plan)
        start = self.plan[stage]
        following = stages.index(stage) + 1
        end = self.plan[stages[following]] if following < len(stages) else 1.0
        progress = round(start + (end - start) * min(max(share, 0.0), 1.0), 3)
        if share and progress - self._reported < 0.01:
            return  # within a stage, a percent at a time is plenty
        self._reported = progress
        held = in_transaction(
            lambda session: ownership.report(session, self.export_id, HELD, stage.value, progress),
            what=f"reporting export {self.export_id}",
        )
        if not held:
            raise ExportLost(self.export_id)


def run_export(export_id: str) -> None:
    """Build the export to its end; its final status says how it ended."""
    work = in_transaction(
        lambda session: ownership.take(session, export_id, WORKER_ID),
        what=f"taking export {export_id}",
    )
    if work is None:
        logger.info("export %s is gone or not queued; dropping the message", export_id)
        return
    settings = get_settings()
    logger.info("building export %s (%s of job %s)", export_id, work.kind, work.job_id)
    folder = settings.resolved_artifacts_dir / work.job_id / "exports"
    folder.mkdir(parents=True, exist_ok=True)
    token: str | None = None
    try:
        with (
            ExportHeartbeat(export_id, WORKER_ID, interval_s=max(0.5, settings.worker_lease_s / 6)),
            tempfile.TemporaryDirectory(dir=folder, prefix=f".{export_id}.") as scratch,
        ):
            token = in_transaction(
                lambda session: ownership.hub_token(session, export_id),
                what=f"reading export {export_id}'s token",
            )
            store = artifact_store(settings)
            built = build_export(work, token, settings, store, folder, Path(scratch))
    except ExportLost:
        logger.warning("export %s was given to another worker; dropping this build", export_id)
        return
    except Exception as exc:
        reason = _without(describe_failure(exc), token)
        logger.warning("export %s failed: %s", export_id, reason)
        in_transaction(
            lambda session: ownership.fail(session, export_id, HELD, reason=reason),
            what=f"failing export {export_id}",
        )
        return
    finished = in_transaction(
        lambda session: ownership.finish(
            session,
            export_id,
            HELD,
            archive_uri=built.archive_uri,
            size_bytes=built.size_bytes,
            hub_commit_url=built.hub_commit_url,
        ),
        what=f"finishing export {export_id}",
    )
    if finished:
        logger.info("export %s succeeded", export_id)
    else:  # the reaper gave it to another worker meanwhile: that one's build is the export's
        logger.warning("export %s was given to another worker; dropping this build", export_id)


def build_export(
    work: ExportWork,
    token: str | None,
    settings: Settings,
    store: ArtifactStore,
    folder: Path,
    scratch: Path,
) -> Built:
    """The export, built in ``scratch`` (a hub push with ``token``); a merged archive lands in
    ``folder`` (beside the job's other artifacts) and then the store."""
    if work.adapter_uri is None or not store.exists(work.adapter_uri):
        raise ExportFailure("the adapter to export is no longer in the artifact store")
    if work.hub_repo is not None and token is None:
        raise ExportFailure(
            f"the job has no secret named {work.hub_token_secret!r} any more: the hub token "
            "was removed by a config update"
        )
    plan = "adapter" if work.kind == "adapter" else "archive" if work.hub_repo is None else "hub"
    progress = Progress(work.export_id, STAGE_START[plan])
    hub = None
    if work.hub_repo is not None and token is not None:
        hub = HubTarget(
            work.hub_repo,
            token=token,
            private=work.hub_private,
            endpoint=settings.hub_endpoint,
        )
        hub.check_token()
    adapter_dir = fetch_for_reading(store, work.adapter_uri, scratch)
    name = archive_name(work.job_id, work.checkpoint_step)
    if work.kind == "adapter":
        model_dir = copy_adapter(adapter_dir, scratch / name, work.base_model)
    else:
        model_dir = scratch / name
        base_model = resolve_base_model(work.base_model, settings.resolved_model_cache_dir)
        run_merge(base_model, adapter_dir, model_dir, work.dtype, progress)
    write_model_card(model_dir, work)
    if hub is not None:
        progress.stage(ExportStage.UPLOADING)
        message = f"rft: {work.kind} of job {work.job_id}" + (
            "" if work.checkpoint_step is None else f" at step {work.checkpoint_step}"
        )
        return Built(hub_commit_url=hub.push(model_dir, message))
    archive = folder / f"{work.export_id}.tar.gz"
    pack(
        model_dir,
        archive,
        name,
        lambda share: progress.stage(ExportStage.ARCHIVING, share),
        compress_level=settings.export_compress_level,
    )
    progress.stage(ExportStage.STORING)
    size = archive.stat().st_size
    try:
        uri = store.save_file(archive, f"{work.job_id}/exports/{work.export_id}.tar.gz")
    except BaseException:
        archive.unlink(missing_ok=True)
        raise
    if uri.startswith(S3_SCHEME):
        archive.unlink()  # the bucket keeps it
    return Built(archive_uri=uri, size_bytes=size)


def run_merge(
    base_model: str, adapter_dir: Path, out_dir: Path, dtype: str, progress: Progress
) -> None:
    """workers.training.merge in a child process, its stages reported as it reaches them.

    The child says its stages on a pipe of their own (libraries print to stdout at will); its
    output goes to a file whose end explains a failure.
    """
    stages_read, stages_write = os.pipe()
    spec = {
        "base_model": base_model,
        "adapter_dir": str(adapter_dir),
        "out_dir": str(out_dir),
        "dtype": dtype,
        "stages_fd": stages_write,
    }
    with tempfile.TemporaryFile() as output:
        try:
            child = subprocess.Popen(
                [sys.executable, "-m", "workers.training.merge", json.dumps(spec)],
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=output,
                pass_fds=(stages_write,),
            )
        finally:
            os.close(stages_write)  # the child holds its own copy: EOF when it exits
        try:
            with os.fdopen(stages_read) as stages:
                for line in stages:
                    progress.stage(ExportStage(json.loads(line)["stage"]))
            code = child.wait()
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
        if code != 0:
            raise ExportFailure(_merge_failure(code, _tail(output)))


def _merge_failure(code: int, stderr: str) -> str:
    if code < 0:
        name = signal.Signals(-code).name if -code in signal.valid_signals() else str(-code)
        return (
            f"the merge process was killed ({name}): most likely it ran out of memory; the "
            "base model in its dtype must fit in the worker's memory"
        )
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    return f"the merge failed: {lines[-1] if lines else f'exit status {code}'}"


def _tail(handle: IO[bytes]) -> str:
    handle.seek(0, os.SEEK_END)
    handle.seek(max(0, handle.tell() - MERGE_STDERR_TAIL_CHARS))
    return handle.read().decode(errors="replace")


def pack(
    folder: Path,
    archive: Path,
    name: str,
    report: Callable[[float], None],
    *,
    compress_level: int = 1,
) -> None:
    """``folder``'s files as ``name/...`` in a .tar.gz, written aside and renamed into place;
    ``report`` hears the share of bytes packed. Weights barely compress: level 1 takes most of
    what gzip can take (level 6 shrinks them <1 % more, 2-4x slower), 0 only stores them."""
    files = sorted(path for path in folder.rglob("*") if path.is_file())
    total = sum(path.stat().st_size for path in files) or 1
    done = 0
    partial = archive.with_name(archive.name + ".partial")
    try:
        with tarfile.open(partial, "w:gz", compresslevel=compress_level) as packed:
            for path in files:
                entry = packed.gettarinfo(path, arcname=f"{name}/{path.relative_to(folder)}")
                entry.uid = entry.gid = 0
                entry.uname = entry.gname = ""
                with path.open("rb") as handle:
                    reader = _CountingReader(handle, done, total, report)
                    packed.addfile(entry, reader)  # type: ignore[arg-type]
                done += entry.size
                report(done / total)
        partial.replace(archive)
    finally:
        partial.unlink(missing_ok=True)  # cut short (a failure, a lost lease): nothing left


class _CountingReader:
    """A file as tarfile reads it, reporting the share of all ``total`` bytes packed (the
    files before it hold ``before``)."""

    def __init__(
        self, handle: IO[bytes], before: int, total: int, report: Callable[[float], None]
    ) -> None:
        self._handle = handle
        self._packed = before
        self._total = total
        self._report = report

    def read(self, size: int = -1) -> bytes:
        chunk = self._handle.read(size)
        self._packed += len(chunk)
        self._report(self._packed / self._total)
        return chunk


def write_model_card(folder: Path, work: ExportWork) -> None:
    """A README.md (the hub's model card) saying what this is and where it came from."""
    merged = work.kind == "merged"
    step = "final adapter" if work.checkpoint_step is None else f"step {work.checkpoint_step}"
    lines = [
        "---",
        f"base_model: {json.dumps(work.base_model)}",
        f"library_name: {'transformers' if merged else 'peft'}",
        "tags: [rft, grpo, lora]",
        "---",
        "",
        f"# {work.job_id}",
        "",
        (
            f"The base model `{work.base_model}` with the LoRA adapter of rft job "
            f"`{work.job_id}` ({step}) merged into its weights (dtype {work.dtype}). Load it "
            "with `AutoModelForCausalLM.from_pretrained`."
            if merged
            else f"The LoRA adapter of rft job `{work.job_id}` ({step}) for `{work.base_model}`. "
            "Load it with `AutoPeftModelForCausalLM.from_pretrained`."
        ),
        "",
        "Trained with GRPO by rft.",
        "",
    ]
    (folder / "README.md").write_text("\n".join(lines))


class HubTarget:
    """A hub repository written with the user's token; every refusal is an ExportFailure
    saying what the hub answered, the token masked."""

    def __init__(self, repo_id: str, *, token: str, private: bool, endpoint: str | None) -> None:
        from huggingface_hub import HfApi

        self.repo_id = repo_id
        self.private = private
        self._token = token
        self._api = HfApi(endpoint=endpoint, token=token)

    def check_token(self) -> None:
        """Before the long part (a merge takes minutes): is the token one the hub knows?"""
        with self._answers():
            self._api.whoami()

    def push(self, folder: Path, message: str) -> str:
        """Create the repository when missing and upload ``folder`` in one commit; its URL."""
        with self._answers():
            self._api.create_repo(
                self.repo_id, private=self.private, exist_ok=True, repo_type="model"
            )
            commit = self._api.upload_folder(
                repo_id=self.repo_id, folder_path=folder, commit_message=message, repo_type="model"
            )
        return str(commit.commit_url)

    @contextlib.contextmanager
    def _answers(self) -> Iterator[None]:
        from huggingface_hub.errors import HfHubHTTPError

        endpoint = self._api.endpoint
        try:
            yield
        except HfHubHTTPError as exc:
            status = exc.response.status_code if exc.response is not None else None
            reason = _hub_refusal(endpoint, self.repo_id, status, exc)
            raise ExportFailure(_without(reason, self._token)) from None
        # Refused, reset, timed out: whichever HTTP library this huggingface_hub uses says so.
        except Exception as exc:
            reason = f"the hub at {endpoint} could not be used: {type(exc).__name__}: {exc}"
            raise ExportFailure(_without(reason, self._token)) from None


def _hub_refusal(endpoint: str, repo_id: str, status: int | None, exc: Any) -> str:
    if status == 401:
        return (
            f"the hub at {endpoint} refused the token (HTTP 401 Unauthorized): give a valid "
            "token with write access"
        )
    if status == 403:
        return (
            f"the hub at {endpoint} refused to let this token write to {repo_id} (HTTP 403 "
            "Forbidden): give a token with write access to that namespace"
        )
    server = getattr(exc, "server_message", None) or str(exc).splitlines()[0]
    return f"the hub at {endpoint} answered HTTP {status} for {repo_id}: {server}"


def _without(text: str, token: str | None) -> str:
    """``text`` with the token masked, wherever a library may have quoted it."""
    return text.replace(token, "***") if token else text
