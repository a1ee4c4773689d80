"""``rft config``: read and change a running job's config."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rft.cli.context import client_for, console, reports_errors
from rft.cli.files import config_to_yaml, read_config
from rft.cli.summaries import dry_run_summary

config_app = typer.Typer(help="Read and change a running job's config.", no_args_is_help=True)


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
