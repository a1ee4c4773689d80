"""Uid leases: distinct while held, free again once released or once the holder dies."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sandbox.uids import NoFreeUidError, lease_uid


def test_open_leases_never_share_a_uid(tmp_path: Path) -> None:
    leases = [lease_uid(61000, 3, tmp_path) for _ in range(3)]
    assert sorted(lease.uid for lease in leases) == [61000, 61001, 61002]
    with pytest.raises(NoFreeUidError, match="all 3 sandbox uids from 61000 are in use"):
        lease_uid(61000, 3, tmp_path)
    leases[1].release()
    assert not leases[1].held
    again = lease_uid(61000, 3, tmp_path)
    assert again.uid == leases[1].uid
    for lease in (leases[0], leases[2], again):
        lease.release()


def test_a_dead_holder_frees_its_uid(tmp_path: Path) -> None:
    # Another process takes the only uid and is killed without releasing it.
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from sandbox.uids import lease_uid\n"
            f"lease_uid(61000, 1, Path({str(tmp_path)!r})); print('held', flush=True); "
            "time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(NoFreeUidError):
            lease_uid(61000, 1, tmp_path)
    finally:
        holder.kill()
        holder.wait()
    lease_uid(61000, 1, tmp_path).release()
