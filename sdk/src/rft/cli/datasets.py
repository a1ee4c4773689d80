"""``rft datasets``: upload and list datasets."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from rft.cli.context import client_for, console, id_column, plain, reports_errors

datasets_app = typer.Typer(help="Upload and list datasets.", no_args_is_help=True)


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
