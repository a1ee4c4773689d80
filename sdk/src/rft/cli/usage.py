"""``rft usage``: GPU-seconds, tokens and jobs by day or by job."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import typer
from rich.table import Column, Table

from rft.cli.context import client_for, console, reports_errors
from rft.cli.cost import duration_text


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
