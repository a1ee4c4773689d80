"""`pip install ./sdk` in a clean virtualenv brings the client and nothing of the server."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SDK_DIR = Path(__file__).resolve().parents[2] / "sdk"
SERVER_PACKAGES = {"fastapi", "sqlalchemy", "torch", "celery", "uvicorn", "alembic", "trl"}


@pytest.mark.slow
def test_sdk_installs_alone_without_server_dependencies(tmp_path: Path) -> None:
    # Build from a copy: an in-tree build would leave build/ and egg-info files in sdk/.
    source = tmp_path / "sdk"
    shutil.copytree(SDK_DIR, source, ignore=shutil.ignore_patterns("*.egg-info", "build"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    subprocess.run(
        [python, "-m", "pip", "install", "-q", "--disable-pip-version-check", str(source)],
        check=True,
        timeout=600,
    )
    listed = subprocess.run(
        [python, "-m", "pip", "list", "--format=freeze", "--disable-pip-version-check"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    installed = {line.split("==")[0].lower() for line in listed.splitlines()}
    assert {"rft-sdk", "httpx", "pydantic"} <= installed
    assert not installed & SERVER_PACKAGES, installed & SERVER_PACKAGES
    assert not installed & {"typer", "rich", "pyyaml"}, "the cli extra must stay optional"

    probe = "import rft, sys; rft.Client(api_key='k'); print('pandas' in sys.modules)"
    imported = subprocess.run([python, "-c", probe], capture_output=True, text=True, check=True)
    assert imported.stdout.strip() == "False"
    # Without the cli extra the command explains what to install instead of a traceback.
    command = subprocess.run([str(venv / "bin" / "rft")], capture_output=True, text=True)
    assert command.returncode != 0 and "rft-sdk[cli]" in command.stderr
