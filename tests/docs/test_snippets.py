"""Every code snippet of the docs is checked as its marker says (tests/docs/snippets.py;
docs/internals/testing.md, "Docs snippets"): Python compiles, shell parses with ``bash -n``,
every repository file a snippet names exists, and each page's ``run`` snippets run, in page
order, against the session's stack from a folder holding only the page's ``file`` blocks and
the repository files the snippets name. ``reward`` snippets are scored in the pre-flight by
tests/api/test_documented_reward_forms.py; docs/migrate-from-openai.md's ``example`` blocks are
run by tests/api/test_migration_examples.py.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import subprocess
import sys
from itertools import groupby
from pathlib import Path
from typing import Any

import pytest

import rft
from service.stack import LocalStack
from tests.docs.snippets import (
    EXAMPLE_PAGES,
    KINDS,
    ROOT,
    SHELL_LANGUAGES,
    Snippet,
    page_files,
    snippets,
)

SNIPPETS = snippets()
RUN_PAGES = sorted({snippet.page for snippet in SNIPPETS if snippet.kind == "run"})
MARKERS = [kind for kind in KINDS if kind != "example"]
UNFINISHED = {"queued", "running", "pausing", "paused"}
# A run snippet that waits for a job that never gets there fails here, not never.
RUN_TIMEOUT_S = 600


def test_every_snippet_says_how_it_is_tested() -> None:
    problems = []
    for snippet in SNIPPETS:
        if snippet.kind is None:
            problems.append(
                f"{snippet.where}: no marker; put one of <!-- snippet: {' | '.join(MARKERS)} --> "
                "on the line above the fence (docs/internals/testing.md, 'Docs snippets')"
            )
        elif snippet.kind not in KINDS:
            problems.append(f"{snippet.where}: unknown marker {snippet.kind!r}")
        elif snippet.kind == "file" and not snippet.argument:
            problems.append(f"{snippet.where}: <!-- snippet: file NAME --> needs the file's name")
        elif snippet.kind == "reward" and snippet.language != "python":
            problems.append(f"{snippet.where}: a reward snippet is Python")
        elif snippet.kind == "example" and snippet.page not in EXAMPLE_PAGES:
            problems.append(f"{snippet.where}: no test runs this page's example blocks")
    assert not problems, "\n".join(problems)


def by_id(found: list[Snippet]) -> list[Any]:
    return [pytest.param(snippet, id=snippet.where) for snippet in found]


@pytest.mark.parametrize("snippet", by_id([s for s in SNIPPETS if s.language == "python"]))
def test_python_snippets_compile(snippet: Snippet) -> None:
    compile(snippet.source, snippet.where, "exec")


@pytest.mark.parametrize("snippet", by_id([s for s in SNIPPETS if s.language in SHELL_LANGUAGES]))
def test_shell_snippets_parse(snippet: Snippet) -> None:
    checked = subprocess.run(
        ["bash", "-n"], input=snippet.shell, capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, f"{snippet.where}: {checked.stderr}"


def test_snippets_name_files_that_exist() -> None:
    # A snippet naming a repository file the repository does not have (issue 35: the GSM8K
    # rewards.py the docs named was missing) fails whatever its marker.
    missing = [
        f"{snippet.where} names {path}"
        for snippet in SNIPPETS
        for path in snippet.repo_paths()
        if not (ROOT / path).exists()
    ]
    assert not missing, "\n".join(missing)


def run_folder(page: str, run: list[Snippet], folder: Path) -> None:
    """What a reader running the page's snippets has: the page's own files, and the
    repository files the snippets name, at the same relative paths (a clone's root)."""
    for name, content in page_files(page).items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(content)
    for snippet in run:
        for path in snippet.repo_paths():
            source, target = ROOT / path, folder / path
            target.parent.mkdir(parents=True, exist_ok=True)
            if source.is_dir():
                shutil.copytree(source, target, dirs_exist_ok=True)
            elif source.is_file():
                shutil.copyfile(source, target)


def failing_curl(folder: Path) -> Path:
    """A folder whose ``curl`` is the real one with --fail-with-body --show-error: an HTTP
    error a snippet gets (a missing id, a refused body) fails it and says so, where -s alone
    would carry on silently."""
    real = shutil.which("curl")
    assert real is not None, "the shell snippets need curl"
    tools = folder / ".snippet-tools"
    tools.mkdir()
    curl = tools / "curl"
    curl.write_text(f'#!/bin/sh\nexec {real} --fail-with-body --show-error "$@"\n')
    curl.chmod(curl.stat().st_mode | stat.S_IXUSR)
    return tools


def cancel_what_is_left(stack: LocalStack, api_key: str) -> None:
    """Jobs a snippet started and did not wait for (or cancel) would keep the session's one
    worker busy: they are cancelled, as a reader would."""
    with rft.Client(api_key=api_key, base_url=stack.base_url) as client:
        for job in client.jobs.list():
            if job.status in UNFINISHED:
                with contextlib.suppress(rft.ConflictError):  # it ended meanwhile
                    client.jobs.cancel(job.id)


@pytest.mark.parametrize("page", RUN_PAGES)
def test_the_run_snippets_of_each_page_run(
    page: str, stack: LocalStack, api_key: str, tmp_path: Path
) -> None:
    run = [snippet for snippet in SNIPPETS if snippet.page == page and snippet.kind == "run"]
    run_folder(page, run, tmp_path)
    tools = failing_curl(tmp_path)
    env = {
        **os.environ,
        # The SDK's and the CLI's variables (sdk/src/rft/transport.py), and the quickstart
        # curl session's (docs/get-started/quickstart.md).
        "RFT_BASE_URL": stack.base_url,
        "RFT_API_KEY": api_key,
        "RFT": stack.base_url,
        "KEY": api_key,
        "H": f"Authorization: Bearer {api_key}",
        "PATH": os.pathsep.join([str(tools), str(Path(sys.executable).parent), os.environ["PATH"]]),
    }
    try:
        # Consecutive blocks of one language are one script, as a reader pastes them.
        for is_python, group in groupby(run, key=lambda s: s.language == "python"):
            blocks = list(group)
            script = tmp_path / f"snippet-{blocks[0].line}.{'py' if is_python else 'sh'}"
            script.write_text("".join(block.shell for block in blocks))
            command = [sys.executable] if is_python else ["bash", "-euo", "pipefail"]
            lines = ", ".join(str(block.line) for block in blocks)
            try:
                done = subprocess.run(
                    [*command, script.name],
                    cwd=tmp_path,
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=RUN_TIMEOUT_S,
                    check=False,
                )
            except subprocess.TimeoutExpired as expired:
                pytest.fail(
                    f"{page} (lines {lines}) still ran after {RUN_TIMEOUT_S} s (waiting for a "
                    f"job that never gets there?):\n{expired.stdout!r}\n{expired.stderr!r}"
                )
            assert done.returncode == 0, (
                f"{page} (lines {lines}) failed with rc {done.returncode}:\n"
                f"{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
            )
    finally:
        cancel_what_is_left(stack, api_key)
