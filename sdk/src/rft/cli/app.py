"""``rft``: datasets, jobs, live configs, completions and logs from the shell."""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Annotated, ParamSpec, TypeVar

import typer
from rich.console import Console
from rich.live import Live
from rich.table import Column, Table
from rich.text import Text

from rft.cli.cost import cost_lines, duration_text, estimate_lines
from rft.cli.files import config_to_yaml, read_config, read_job_spec
from rft.cli.summaries import dry_run_summary, prompt_as_text, trajectory_lines
from rft.cli.watch import job_view
from rft.cli.webhooks import delivery_table, webhook_table
from rft.client import Client
from rft.errors import RFTError
from rft.models import Completion, Export, Job, JobEvent, JobStatus, Step

app = typer.Typer(help="rft: GRPO reinforcement fine-tuning as a service.", no_args_is_help=True)
datasets_app = typer.Typer(help="Upload and list datasets.", no_args_is_help=True)
jobs_app = typer.Typer(help="Create, follow and cancel training jobs.", no_args_is_help=True)
config_app = typer.Typer(help="Read and change a running job's config.", no_args_is_help=True)
completions_app = typer.Typer(help="Look at sampled completions.", no_args_is_help=True)
checkpoints_app = typer.Typer(
    help="List a job's checkpoints and download their adapters.", no_args_is_help=True
)
app.add_typer(datasets_app, name="datasets")
app.add_typer(jobs_app, name="jobs")
app.add_typer(config_app, name="config")
app.add_typer(completions_app, name="completions")
app.add_typer(checkpoints_app, name="checkpoints")
models_app = typer.Typer(help="Download the built-in base model.", no_args_is_help=True)
app.add_typer(models_app, name="models")
webhooks_app = typer.Typer(
    help="Send job events to your URLs, signed; see what was delivered.", no_args_is_help=True
)
app.add_typer(webhooks_app, name="webhooks")

console = Console()
error_console = Console(stderr=True)

Params = ParamSpec("Params")
Result = TypeVar("Result")


def reports_errors(command: Callable[Params, Result]) -> Callable[Params, Result]:
    """Print API errors as one readable line and exit 1, instead of a traceback."""

    @functools.wraps(command)
    def run(*args: Params.args, **kwargs: Params.kwargs) -> Result:
        try:
            return command(*args, **kwargs)
        except RFTError as error:
            error_console.print(f"[red]error:[/red] {error}", highlight=False)
            raise typer.Exit(1) from None

    return run


@app.callback()
def connection(
    context: typer.Context,
    api_key: Annotated[
        str | None, typer.Option(envvar="RFT_API_KEY", help="API key.", show_default=False)
    ] = None,
    base_url: Annotated[
        str | None,
        typer.Option(envvar="RFT_BASE_URL", help="Server URL (default http://127.0.0.1:8000)."),
    ] = None,
) -> None:
    context.obj = {"api_key": api_key, "base_url": base_url}


def client_for(context: typer.Context) -> Client:
    settings = context.find_root().obj or {}
    client = Client(api_key=settings.get("api_key"), base_url=settings.get("base_url"))
    context.call_on_close(client.close)
    return client


def _when(job: Job) -> str:
    return job.created_at.strftime("%Y-%m-%d %H:%M:%S")


def id_column() -> Column:
    # Ids are copied into the next command: never folded or cut, the other columns give way.
    return Column("id", no_wrap=True, min_width=len("job_") + 32)


def plain(text: str) -> Text:
    """User content in a table cell: shown as typed, never read as Rich markup."""
    return Text(text)


DestinationOption = Annotated[
    Path, typer.Option("--output", "-o", file_okay=False, help="Folder to save into.")
]
ArchiveOption = Annotated[
    bool, typer.Option("--archive", help="Keep the .tar.gz instead of unpacking it.")
]


# --- datasets -------------------------------------------------------------------------------


@datasets_app.command("upload")
@reports_errors
def upload_dataset(
    context: typer.Context,
    path: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="JSONL, CSV, Parquet.")],
    name: Annotated[str | None, typer.Option(help="Defaults to the file name.")] = None,
) -> None:
    """Upload a dataset file."""
    dataset = client_for(context).datasets.upload(path, name=name)
    console.print(
        f"uploaded [bold]{dataset.id}[/bold]: {dataset.row_count} rows, {dataset.columns}"
    )


@datasets_app.command("list")
@reports_errors
def list_datasets(context: typer.Context) -> None:
    """Datasets, newest first."""
    table = Table(id_column(), "name", "format", "rows", "columns", "created")
    for dataset in client_for(context).datasets.list():
        table.add_row(
            dataset.id,
            plain(dataset.name),
            dataset.file_format,
            str(dataset.row_count),
            ", ".join(dataset.columns),
            dataset.created_at.strftime("%Y-%m-%d %H:%M:%S"),
        )
    console.print(table)


# --- jobs -----------------------------------------------------------------------------------


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


@models_app.command("download")
@reports_errors
def download_model(
    context: typer.Context, name: str, output: DestinationOption, archive: ArchiveOption = False
) -> None:
    """Save the built-in base model NAME (rft-tiny) as a folder its adapters load against."""
    path = client_for(context).models.download(name, output, extract=not archive)
    console.print(f"saved {path}", markup=False, highlight=False)


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


# --- config ---------------------------------------------------------------------------------


@config_app.command("get")
@reports_errors
def get_config(
    context: typer.Context,
    job_id: str,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write the YAML to this file.")
    ] = None,
) -> None:
    """The job's live config as YAML (edit it, then `rft config update`)."""
    text = config_to_yaml(client_for(context).jobs.get_config(job_id))
    if output is None:
        console.print(text, markup=False, highlight=False, end="")
    else:
        output.write_text(text)
        console.print(f"wrote {output}")


@config_app.command("update")
@reports_errors
def update_config(
    context: typer.Context,
    job_id: str,
    file: Annotated[Path, typer.Option("--file", "-f", exists=True, help="Config YAML.")],
    dry_run: Annotated[bool, typer.Option(help="Rescore the last step; change nothing.")] = False,
    force: Annotated[
        bool, typer.Option(help="Overwrite even if the config changed since `version`.")
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="With --dry-run: every rescored completion as JSON.")
    ] = False,
) -> None:
    """Send an edited config (from `rft config get -o`); --dry-run summarises its effect."""
    config = read_config(file)
    jobs = client_for(context).jobs
    if dry_run:
        result = jobs.update_config(job_id, config, dry_run=True, check_version=not force)
        if as_json:
            console.print_json(result.model_dump_json())
            return
        current = jobs.get_config(job_id)
        for line in dry_run_summary(current, config, result):
            console.print(line, markup=False, highlight=False)
        return
    update = jobs.update_config(job_id, config, check_version=not force)
    console.print(
        f"config version [bold]{update.version}[/bold] applies from step {update.applies_from_step}"
    )


# --- completions and logs -------------------------------------------------------------------


PROMPT_CHARS_SHOWN = 240


def _completion_table(title: str, completions: list[Completion]) -> Table:
    names = sorted({name for c in completions for name in c.scores})
    table = Table("total", *names, "prompt", "completion", title=title, title_justify="left")
    for completion in completions:
        scores = [completion.scores.get(name) for name in names]
        table.add_row(
            "-" if completion.total is None else f"{completion.total:.3f}",
            *("-" if score is None else f"{score:.3f}" for score in scores),
            plain(prompt_as_text(completion.prompt, max_chars=PROMPT_CHARS_SHOWN)),
            plain(_completion_text(completion)),
        )
    return table


def _completion_text(completion: Completion) -> str:
    # An agent's rollout reads turn by turn; a single answer as it was sampled.
    if completion.trajectory:
        return "\n".join(trajectory_lines(completion.trajectory))
    return completion.completion


@completions_app.command("show")
@reports_errors
def show_completions(
    context: typer.Context,
    job_id: str,
    step: Annotated[int, typer.Option(help="The step whose completions to show.")],
    count: Annotated[int, typer.Option(help="How many best and worst.")] = 3,
) -> None:
    """The best and worst completions of a step, by total reward.

    An agent job's completions show their trajectory turn by turn: assistant text,
    ``-> tool(args)`` for each call, ``<- result`` or ``!! tool kind: message`` for each
    answer."""
    completions = list(client_for(context).jobs.completions(job_id, step=step, limit=1000))
    if not completions:
        error_console.print(f"no completions recorded for step {step}")
        raise typer.Exit(1)

    def total(completion: Completion) -> float:
        return completion.total if completion.total is not None else float("-inf")

    ranked = sorted(completions, key=total, reverse=True)
    console.print(_completion_table(f"best of step {step}", ranked[:count]))
    console.print(_completion_table(f"worst of step {step}", ranked[-count:][::-1]))


@app.command("logs")
@reports_errors
def show_logs(
    context: typer.Context,
    job_id: str,
    step: Annotated[int | None, typer.Option(help="Only this step.")] = None,
    function: Annotated[str | None, typer.Option(help="Only this reward function.")] = None,
) -> None:
    """What reward functions printed."""
    for entry in client_for(context).jobs.logs(job_id, step=step, function=function):
        version = f" v{entry.function_version}" if entry.function_version is not None else ""
        console.print(f"[bold]step {entry.step} · {entry.function_name}{version}[/bold]")
        console.print(entry.output, markup=False, highlight=False, end="")
        if entry.truncated:
            console.print("[dim]… (truncated)[/dim]")


# --- checkpoints ----------------------------------------------------------------------------


@checkpoints_app.command("list")
@reports_errors
def list_checkpoints(context: typer.Context, job_id: str) -> None:
    """The job's saved checkpoints, and whether its final adapter is ready."""
    listing = client_for(context).jobs.checkpoints(job_id)
    table = Table("step", "size", "saved", "eval reward", "best")
    for checkpoint in listing.data:
        table.add_row(
            str(checkpoint.step),
            f"{checkpoint.size_bytes / 1e6:.1f} MB",
            checkpoint.created_at.strftime("%Y-%m-%d %H:%M:%S"),
            "" if checkpoint.eval_reward is None else f"{checkpoint.eval_reward:.4f}",
            "best" if checkpoint.is_best else "",
        )
    if listing.data:
        console.print(table)
    else:
        console.print("no checkpoints yet")
    final = "ready (rft jobs download-adapter)" if listing.final_adapter_path else "not yet"
    console.print(f"final adapter: {final}")


@checkpoints_app.command("download")
@reports_errors
def download_checkpoint(
    context: typer.Context,
    job_id: str,
    step: int,
    output: DestinationOption,
    archive: ArchiveOption = False,
) -> None:
    """Save the LoRA adapter of the checkpoint at STEP (a PEFT folder)."""
    path = client_for(context).jobs.download_checkpoint(job_id, step, output, extract=not archive)
    console.print(f"saved {path}", markup=False, highlight=False)


# --- chat -----------------------------------------------------------------------------------


@app.command("chat")
@reports_errors
def chat(
    context: typer.Context,
    model: Annotated[
        str, typer.Argument(help="A job id, JOB:checkpoint-N, or a base model such as rft-tiny.")
    ],
    prompt: str,
    system: Annotated[str | None, typer.Option(help="A system message first.")] = None,
    max_tokens: Annotated[int | None, typer.Option(help="Longest answer, in tokens.")] = None,
    temperature: Annotated[
        float | None, typer.Option(help="0 decodes greedily (default 1.0).")
    ] = None,
    seed: Annotated[int | None, typer.Option(help="Repeatable sampling.")] = None,
    raw: Annotated[
        bool, typer.Option("--raw", help="Continue PROMPT as text, without the chat template.")
    ] = False,
) -> None:
    """Talk to a trained adapter (or a base model): print its answer to PROMPT."""
    client = client_for(context)
    if raw:
        text = client.completions.create(
            model=model, prompt=prompt, max_tokens=max_tokens, temperature=temperature, seed=seed
        )
        answer = text.choices[0].text
    else:
        messages = [{"role": "system", "content": system}] if system else []
        messages.append({"role": "user", "content": prompt})
        reply = client.chat.completions.create(
            model=model,
            messages=messages,
            max_tokens=max_tokens,
            temperature=temperature,
            seed=seed,
        )
        answer = reply.choices[0].message.content or ""
    console.print(answer, markup=False, highlight=False)


@app.command("usage")
@reports_errors
def usage(
    context: typer.Context,
    start: Annotated[
        datetime | None,
        typer.Option("--from", help="Start (UTC); default: 30 days before --to."),
    ] = None,
    end: Annotated[datetime | None, typer.Option("--to", help="End (UTC); default: now.")] = None,
    group_by: Annotated[str, typer.Option(help="'day' or 'job'.")] = "day",
) -> None:
    """Your GPU-seconds, completion tokens and jobs, by UTC day or by job."""
    if group_by not in ("day", "job"):
        raise typer.BadParameter("--group-by takes 'day' or 'job'")
    report = client_for(context).usage.retrieve(
        start=start, end=end, group_by="day" if group_by == "day" else "job"
    )
    table = Table(
        group_by, Column("GPU-seconds", justify="right"), Column("tokens", justify="right"),
        Column("jobs", justify="right"),
        title=f"usage {report.start:%Y-%m-%d %H:%M} .. {report.end:%Y-%m-%d %H:%M} UTC",
    )  # fmt: skip
    for row in report.rows:
        key = str(row.day) if row.day is not None else str(row.job_id)
        table.add_row(key, f"{row.gpu_seconds:,.1f}", f"{row.tokens:,}", str(row.jobs))
    table.add_row(
        "total", f"{report.gpu_seconds:,.1f}", f"{report.tokens:,}", str(report.jobs),
        style="bold",
    )  # fmt: skip
    console.print(table)
    console.print(f"{duration_text(report.gpu_seconds)} of device time", highlight=False)


# --- webhooks -------------------------------------------------------------------------------


@webhooks_app.command("create")
@reports_errors
def create_webhook(
    context: typer.Context,
    url: str,
    event: Annotated[
        list[str],
        typer.Option("--event", "-e", help="An event to send (repeat): job.succeeded, ..."),
    ],
    description: Annotated[str | None, typer.Option(help="A note for you.")] = None,
) -> None:
    """Register URL for job events; prints the signing secret, shown only this once."""
    created = client_for(context).webhooks.create(
        url=url, event_types=event, description=description
    )
    console.print(f"created [bold]{created.id}[/bold] for {', '.join(created.event_types)}")
    console.print(f"signing secret (shown once): {created.secret}", markup=False)


@webhooks_app.command("list")
@reports_errors
def list_webhooks(context: typer.Context) -> None:
    """Webhooks, newest first."""
    console.print(webhook_table(client_for(context).webhooks.list()))


@webhooks_app.command("delete")
@reports_errors
def delete_webhook(context: typer.Context, webhook_id: str) -> None:
    """Stop sending to a webhook; its pending deliveries are dropped."""
    client_for(context).webhooks.delete(webhook_id)
    console.print(f"deleted {webhook_id}")


@webhooks_app.command("test")
@reports_errors
def test_webhook(context: typer.Context, webhook_id: str) -> None:
    """Send a webhook.test event to the webhook's URL."""
    delivery = client_for(context).webhooks.test(webhook_id)
    console.print(f"queued {delivery.id}: see `rft webhooks deliveries {webhook_id}`")


@webhooks_app.command("deliveries")
@reports_errors
def list_deliveries(
    context: typer.Context,
    webhook_id: str,
    limit: Annotated[int, typer.Option(help="Deliveries to show, newest first.")] = 20,
) -> None:
    """The delivery log: each event sent, and every try with the receiver's answer."""
    console.print(delivery_table(client_for(context).webhooks.deliveries(webhook_id, limit=limit)))
