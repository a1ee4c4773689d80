"""``rft``: datasets, jobs, live configs, completions and logs from the shell.

The typer app is put together here; each command group is a module of its own (datasets.py,
jobs.py, config.py, completions.py, checkpoints.py, models.py, webhooks.py), as are the
top-level ``logs`` (completions.py), ``chat`` and ``usage``.
"""

from __future__ import annotations

from typing import Annotated

import typer

from rft.cli.chat import chat
from rft.cli.checkpoints import checkpoints_app
from rft.cli.completions import completions_app, show_logs
from rft.cli.config import config_app
from rft.cli.datasets import datasets_app
from rft.cli.jobs import jobs_app
from rft.cli.models import models_app
from rft.cli.usage import usage
from rft.cli.webhooks import webhooks_app

app = typer.Typer(help="rft: GRPO reinforcement fine-tuning as a service.", no_args_is_help=True)

app.add_typer(datasets_app, name="datasets")
app.add_typer(jobs_app, name="jobs")
app.add_typer(config_app, name="config")
app.add_typer(completions_app, name="completions")
app.add_typer(checkpoints_app, name="checkpoints")
app.add_typer(models_app, name="models")
app.add_typer(webhooks_app, name="webhooks")
app.command("logs")(show_logs)
app.command("chat")(chat)
app.command("usage")(usage)


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
