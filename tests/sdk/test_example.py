"""examples/full_session.py end to end, as a user would run it: a subprocess with env vars."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from service.stack import LocalStack

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "full_session.py"


def test_full_session_example_runs(stack: LocalStack, api_key: str) -> None:
    env = {**os.environ, "RFT_BASE_URL": stack.base_url, "RFT_API_KEY": api_key}
    result = subprocess.run(
        [sys.executable, str(EXAMPLE)], env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stdout + result.stderr
    output = result.stdout
    assert "job succeeded" in output, output + result.stderr
    assert "config v2 applies from step" in output
    assert "best " in output and "worst" in output
    # Steps after the update were scored by config v2.
    step_lines = [line.split() for line in output.splitlines() if line[:4].strip().isdigit()]
    assert len(step_lines) == 40 and step_lines[-1][1] == "v2"
