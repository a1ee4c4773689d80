"""Starting the embedded Postgres prints nothing: pgserver's runtime folder (XDG_RUNTIME_DIR)
is one platformdirs accepts (mode 0700), so it does not warn and fall back to /tmp."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

START_AND_STOP = """
import sys
from pathlib import Path
from service.embedded import EmbeddedPostgres
postgres = EmbeddedPostgres(Path(sys.argv[1]) / "postgres")
postgres.start()
postgres.stop()
"""


def test_embedded_postgres_starts_without_a_runtime_dir_warning() -> None:
    # Not under pytest's tmp dir: that is mode 700, and embedded Postgres runs as its own user.
    state_dir = Path(tempfile.mkdtemp(prefix="rft-quiet-"))
    try:
        env = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"}
        started = subprocess.run(
            [sys.executable, "-c", START_AND_STOP, str(state_dir)],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=False,
        )
        assert started.returncode == 0, started.stderr
        assert (started.stdout, started.stderr) == ("", "")
        assert (state_dir / "runtime").stat().st_mode & 0o777 == 0o700
    finally:
        shutil.rmtree(state_dir, ignore_errors=True)
