"""A job's extra pip packages for its reward functions, installed into a folder of its own
that the sandbox mounts read-only. The worker's own environment is never touched."""

from __future__ import annotations

import fcntl
import subprocess
import sys
from pathlib import Path


class PackageInstallError(RuntimeError):
    """The job's runtime packages could not be installed; the message, as it is, tells the
    job's user why (pip's last lines)."""


def install_runtime_packages(packages: list[str], target: Path, *, timeout_s: float = 900) -> Path:
    """pip install ``packages`` into ``target`` (reused when the same list is already there).

    Installers of one target take turns (the nodes of a job over several machines sharing its
    folder): the later one finds the list installed."""
    target.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _install(packages, target, timeout_s)


def _install(packages: list[str], target: Path, timeout_s: float) -> Path:
    marker = target / ".rft-requirements"
    wanted = "\n".join(sorted(packages))
    if marker.exists() and marker.read_text() == wanted:
        return target
    try:
        completed = subprocess.run(
            [
                sys.executable, "-m", "pip", "install", "--no-input", "--disable-pip-version-check",
                "--no-warn-script-location", "--target", str(target), "--upgrade", *packages,
            ],
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        raise PackageInstallError(
            f"installing runtime packages {packages} took longer than {timeout_s:.0f} s"
        ) from None
    if completed.returncode != 0:
        error_lines = [line for line in completed.stderr.splitlines() if line.strip()]
        raise PackageInstallError(
            f"pip could not install runtime packages {packages}:\n" + "\n".join(error_lines[-15:])
        )
    marker.write_text(wanted)
    return target
