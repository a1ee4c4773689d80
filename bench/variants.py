"""Comparing a benchmark's variants fairly: interleaved rounds, and each measurement taken in a
fresh child process (the script runs itself with its child's arguments; the child prints its
figures as one JSON line, last)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

Variant = TypeVar("Variant")


def interleaved(variants: Sequence[Variant], rounds: int) -> Iterator[tuple[int, Variant]]:
    """(round index, variant): every variant once a round, in reverse order every other round,
    so that a machine's load drifting during the run hits them alike."""
    for index in range(rounds):
        for variant in variants if index % 2 == 0 else variants[::-1]:
            yield index, variant


def child_result(
    arguments: Sequence[str],
    *,
    what: str,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> dict[str, Any]:
    """Runs ``python *arguments`` (a bench script and its child's arguments) and returns the
    JSON object of the last line it printed; raises with the end of its stderr (``what``
    failed) when it fails."""
    result = subprocess.run(
        [sys.executable, *arguments], capture_output=True, text=True, env=env, cwd=cwd, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(f"{what} failed:\n{result.stderr[-4000:]}")
    return dict(json.loads(result.stdout.strip().splitlines()[-1]))
