"""``rft completions`` and ``rft logs``: sampled completions, and what reward functions printed."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from rft.agents import trajectory_lines
from rft.cli.context import client_for, console, error_console, plain, reports_errors
from rft.cli.summaries import prompt_as_text
from rft.models import Completion

completions_app = typer.Typer(help="Look at sampled completions.", no_args_is_help=True)


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
