"""``rft chat``: talk to a trained adapter or a base model."""

from __future__ import annotations

from typing import Annotated

import typer

from rft.cli.context import client_for, console, reports_errors


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
