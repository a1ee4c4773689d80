"""What every ``rft`` command stands on: the consoles, the client made from the root options,
API errors printed as one line, and the options and cells several commands share."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, ParamSpec, TypeVar

import typer
from rich.console import Console
from rich.table import Column
from rich.text import Text

from rft.client import Client
from rft.errors import RFTError

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


def client_for(context: typer.Context) -> Client:
    settings = context.find_root().obj or {}
    client = Client(api_key=settings.get("api_key"), base_url=settings.get("base_url"))
    context.call_on_close(client.close)
    return client


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
