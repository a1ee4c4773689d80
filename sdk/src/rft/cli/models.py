"""``rft models``: download the built-in base model."""

from __future__ import annotations

import typer

from rft.cli.context import ArchiveOption, DestinationOption, client_for, console, reports_errors

models_app = typer.Typer(help="Download the built-in base model.", no_args_is_help=True)


@models_app.command("download")
@reports_errors
def download_model(
    context: typer.Context, name: str, output: DestinationOption, archive: ArchiveOption = False
) -> None:
    """Save the built-in base model NAME (rft-tiny) as a folder its adapters load against."""
    path = client_for(context).models.download(name, output, extract=not archive)
    console.print(f"saved {path}", markup=False, highlight=False)
