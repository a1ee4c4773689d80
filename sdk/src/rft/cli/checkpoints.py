"""``rft checkpoints``: list a job's checkpoints and download their adapters."""

from __future__ import annotations

import typer
from rich.table import Table

from rft.cli.context import ArchiveOption, DestinationOption, client_for, console, reports_errors

checkpoints_app = typer.Typer(
    help="List a job's checkpoints and download their adapters.", no_args_is_help=True
)


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
