"""``rft jobs``: create, list, follow, pause, resume, cancel and download jobs."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.live import Live
from rich.table import Column, Table

from rft.cli.context import (
    ArchiveOption,
    DestinationOption,
    client_for,
    console,
    id_column,
    plain,
    reports_errors,
)
from rft.cli.cost import cost_lines, estimate_lines
from rft.cli.files import read_job_spec
from rft.cli.watch import job_view
from rft.errors import RFTError
from rft.models import Export, Job, JobEvent, JobStatus, Step

jobs_app = typer.Typer(help="Create, follow and cancel training jobs.", no_args_is_help=True)


def _when(job: Job) -> str:
    return job.created_at.strftime("%Y-%m-%d %H:%M:%S")


@jobs_app.command("create")
@reports_errors
def create_job(
    context: typer.Context,
    file: Annotated[Path, typer.Option("--file", "-f", exists=True, help="The job's YAML spec.")],
    estimate: Annotated[
        bool,
        typer.Option(
            "--estimate", help="Only say what it would cost on the running workers; create nothing."
        ),
    ] = False,
) -> None:
    """Create a job from YAML: dataset_id (or dataset: a file to upload), base_model,
    reward_functions (name: {source or source_file, weight} or {model, weight}),
    hyperparameters, guards (thresholds and pause_on), init_from. Says its expected cost."""
    spec = read_job_spec(file)
    client = client_for(context)
    dataset_path = spec.pop("dataset_path", None)
    if dataset_path is not None:
        dataset = client.datasets.upload(dataset_path)
        console.print(f"uploaded {dataset_path} as {dataset.id} ({dataset.row_count} rows)")
        spec["dataset"] = dataset.id
    if estimate:
        for line in estimate_lines(client.jobs.estimate(**spec)):
            console.print(line, markup=False, highlight=False)
        return
    job = client.jobs.create(**spec)
    console.print(f"created job [bold]{job.id}[/bold] ({job.status.value})")
    if job.cost_estimate is not None:
        for line in estimate_lines(job.cost_estimate):
            console.print(f"  {line}", markup=False, highlight=False)


@jobs_app.command("list")
@reports_errors
def list_jobs(
    context: typer.Context,
    status: Annotated[str | None, typer.Option(help="Only jobs in this status.")] = None,
) -> None:
    """Jobs, newest first."""
    table = Table(id_column(), "name", Column("status", no_wrap=True), "steps", "model", "created")
    for job in client_for(context).jobs.list(status=status):
        table.add_row(
            job.id,
            plain(job.name or ""),
            job.status.value,
            f"{job.steps_completed}/{job.train_steps}",
            job.base_model,
            _when(job),
        )
    console.print(table)


@jobs_app.command("get")
@reports_errors
def get_job(
    context: typer.Context,
    job_id: str,
    cost: Annotated[
        bool, typer.Option("--cost", help="Its expected cost, GPU-seconds and time left.")
    ] = False,
) -> None:
    """One job as JSON (its cost_estimate, gpu_seconds and eta_seconds among the fields)."""
    job = client_for(context).jobs.get(job_id)
    if cost:
        for line in cost_lines(job):
            console.print(line, markup=False, highlight=False)
        return
    console.print_json(job.model_dump_json())


@jobs_app.command("cancel")
@reports_errors
def cancel_job(context: typer.Context, job_id: str) -> None:
    """Stop a job: queued, running, pausing or paused."""
    job = client_for(context).jobs.cancel(job_id)
    console.print(f"{job.id} {job.status.value}")


@jobs_app.command("pause")
@reports_errors
def pause_job(context: typer.Context, job_id: str) -> None:
    """Checkpoint at the next step and free the worker; `rft jobs resume` continues.

    The job is `pausing` until the worker has saved the checkpoint, then `paused`.
    """
    job = client_for(context).jobs.pause(job_id)
    console.print(
        f"{job.id} {job.status.value} (the worker saves a checkpoint and lets go; the job "
        "then reads paused)"
    )


@jobs_app.command("resume")
@reports_errors
def resume_job(context: typer.Context, job_id: str) -> None:
    """Continue a paused job from its checkpoint, or call off a pause still in progress."""
    job = client_for(context).jobs.resume(job_id)
    if job.status == JobStatus.RUNNING:
        console.print(f"{job.id} {job.status.value} (the pause is called off: training goes on)")
    else:
        console.print(f"{job.id} {job.status.value}")


@jobs_app.command("evals")
@reports_errors
def list_evals(context: typer.Context, job_id: str) -> None:
    """The validation results: the adapter's reward on the validation prompts, per eval step."""
    evaluations = client_for(context).jobs.evals(job_id)
    if not evaluations:
        console.print("no evaluations yet (does the job have a validation set?)")
        return
    names = sorted({name for e in evaluations for name in e.reward_functions})
    table = Table("step", "reward", "std", *names, "samples", "seconds")
    for evaluation in evaluations:
        table.add_row(
            str(evaluation.step),
            _score(evaluation.reward_mean),
            _score(evaluation.reward_std),
            *(
                _score(m.mean) if (m := evaluation.reward_functions.get(name)) else ""
                for name in names
            ),
            str(evaluation.samples),
            f"{evaluation.duration_s:.1f}",
        )
    console.print(table)


def _score(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


@jobs_app.command("watch")
@reports_errors
def watch_job(
    context: typer.Context,
    job_id: str,
    interval: Annotated[
        float, typer.Option(help="Least seconds between redraws (updates arrive live).")
    ] = 0.2,
) -> None:
    """A live table of the total reward and each function's recent history, until the job ends."""
    client = client_for(context)
    job = client.jobs.get(job_id)
    steps: list[Step] = []
    evaluation: JobEvent | None = None
    drawn_at = 0.0
    with Live(job_view(job, steps), console=console, auto_refresh=False) as live:
        for item in client.jobs.stream(job_id, include_job_snapshots=True):
            if isinstance(item, Job):
                job = item
            elif isinstance(item, Step):
                steps = add_step(steps, item)
            elif item.kind == "eval":
                evaluation = item
            elif item.kind == "resumed" and "checkpoint_step" in item.data:
                # The job went back to a checkpoint: the steps after it are re-run.
                checkpoint = int(item.data["checkpoint_step"])
                steps = [step for step in steps if step.step <= checkpoint]
            if time.monotonic() - drawn_at >= interval:
                live.update(job_view(job, steps, evaluation), refresh=True)
                drawn_at = time.monotonic()
        if not job.status.is_terminal:
            job = client.jobs.get(job_id)
        live.update(job_view(job, steps, evaluation), refresh=True)
    console.print()  # Live leaves the cursor at the table's end when output is not a terminal.
    if job.status.value != "succeeded":
        raise typer.Exit(1)


def add_step(steps: list[Step], step: Step) -> list[Step]:
    """``steps`` with ``step`` appended, replacing any it re-ran."""
    if steps and steps[-1].step >= step.step:
        steps = [kept for kept in steps if kept.step < step.step]
    steps.append(step)
    return steps


@jobs_app.command("download-adapter")
@reports_errors
def download_adapter(
    context: typer.Context, job_id: str, output: DestinationOption, archive: ArchiveOption = False
) -> None:
    """Save the final LoRA adapter of a finished job (a PEFT folder)."""
    path = client_for(context).jobs.download_adapter(job_id, output, extract=not archive)
    console.print(f"saved {path}", markup=False, highlight=False)


@jobs_app.command("download")
@reports_errors
def download(
    context: typer.Context,
    job_id: str,
    output: DestinationOption,
    merged: Annotated[
        bool,
        typer.Option(
            "--merged",
            help="The base model with the adapter merged in (a model folder in safetensors), "
            "built on a worker first.",
        ),
    ] = False,
    checkpoint: Annotated[
        int | None, typer.Option(help="A checkpoint's adapter instead of the final one.")
    ] = None,
    dtype: Annotated[
        str, typer.Option(help="--merged: auto (the base model's), float32, bfloat16, float16.")
    ] = "auto",
    archive: ArchiveOption = False,
) -> None:
    """Save the job's LoRA adapter, or with --merged a model that needs no adapter."""
    jobs = client_for(context).jobs
    extract = not archive
    if merged:
        with console.status("merging on a worker...") as status:
            path = jobs.download_merged(
                job_id,
                output,
                checkpoint=checkpoint,
                dtype=dtype,
                extract=extract,
                on_update=lambda export: status.update(export_line(export)),
            )
    elif checkpoint is not None:
        path = jobs.download_checkpoint(job_id, checkpoint, output, extract=extract)
    else:
        path = jobs.download_adapter(job_id, output, extract=extract)
    console.print(f"saved {path}", markup=False, highlight=False)


@jobs_app.command("report")
@reports_errors
def job_report(
    context: typer.Context,
    job_id: str,
    output: Annotated[Path, typer.Option("--output", "-o", help="The HTML file to write.")] = Path(
        "report.html"
    ),
    step: Annotated[
        list[int] | None,
        typer.Option(
            "--step",
            help="A step whose best and worst completions to show (repeat it; default: the "
            "first and the last step).",
        ),
    ] = None,
) -> None:
    """Save the job's report: one self-contained HTML page to open offline or share."""
    client_for(context).jobs.report(job_id, steps=step, path=output)
    console.print(f"saved {output}", markup=False, highlight=False)


@jobs_app.command("push-to-hub")
@reports_errors
def push_to_hub(
    context: typer.Context,
    job_id: str,
    repo_id: Annotated[str, typer.Argument(help="The hub repository, e.g. my-org/my-model.")],
    merged: Annotated[
        bool, typer.Option("--merged", help="Push the merged model, not the adapter.")
    ] = False,
    checkpoint: Annotated[
        int | None, typer.Option(help="A checkpoint's adapter instead of the final one.")
    ] = None,
    dtype: Annotated[str, typer.Option(help="--merged: the weights' dtype.")] = "auto",
    token_secret: Annotated[
        str | None, typer.Option(help="The job secret that holds the hub token.")
    ] = None,
    token_env: Annotated[
        str, typer.Option(help="Else: the environment variable that holds the hub token.")
    ] = "HF_TOKEN",
    public: Annotated[
        bool, typer.Option("--public", help="Create the repository public (default private).")
    ] = False,
) -> None:
    """Push the job's adapter (or --merged model) to a Hugging Face hub repository."""
    token = None
    if token_secret is None:
        token = os.environ.get(token_env)
        if not token:
            raise RFTError(f"no hub token: set {token_env}, or name a job secret (--token-secret)")
    with console.status("pushing from a worker...") as status:
        export = client_for(context).jobs.push_to_hub(
            job_id,
            repo_id,
            token=token,
            token_secret=token_secret,
            merged=merged,
            checkpoint=checkpoint,
            dtype=dtype,
            private=not public,
            on_update=lambda export: status.update(export_line(export)),
        )
    url = export.hub.commit_url if export.hub else None
    console.print(f"pushed {repo_id}: {url}", markup=False, highlight=False)


def export_line(export: Export) -> str:
    """What an export is doing, for a status line."""
    return f"{export.id} {export.status.value} {export.stage or ''} {export.progress:.0%}"
