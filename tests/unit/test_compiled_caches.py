"""Compiled artifacts kept outside the clone and the environment, in a folder named by the pins
they are built against (workers/compiled_caches.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from workers import compiled_caches
from workers.compiled_caches import (
    adopt_built_deepspeed_ops,
    keyed_cache_dir,
    torch_extensions_dir,
)


@pytest.fixture(autouse=True)
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    return tmp_path / "rft"


def test_the_same_pins_find_the_same_folder_under_the_users_cache(cache_home: Path) -> None:
    folder = torch_extensions_dir()
    assert folder == torch_extensions_dir()
    assert folder.parent == cache_home / "torch-extensions" and folder.is_dir()
    versions = (folder / "versions.txt").read_text().splitlines()
    assert versions[0].startswith("python ")
    assert [line.split("==")[0].split()[0] for line in versions[1:]] == ["torch", "deepspeed"]


def test_another_pin_builds_into_another_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    before = keyed_cache_dir("ops", ["torch"])
    real = compiled_caches.metadata.version
    monkeypatch.setattr(
        compiled_caches.metadata,
        "version",
        lambda name: "9.9.9" if name == "torch" else real(name),
    )
    after = keyed_cache_dir("ops", ["torch"])
    assert after != before and after.parent == before.parent
    assert "torch==9.9.9" in (after / "versions.txt").read_text()
    # A package that is not installed is part of the key too ("absent").
    assert (
        "nothing-here absent"
        in (keyed_cache_dir("ops", ["nothing-here"]) / "versions.txt").read_text()
    )


def test_only_a_folder_built_for_these_pins_is_adopted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The compose file's volume (no versions.txt) or another torch's folder: left to ninja.
    elsewhere = tmp_path / "volume" / "deepspeed_shm_comm"
    elsewhere.mkdir(parents=True)
    (elsewhere / "deepspeed_shm_comm.so").write_bytes(b"not a library")
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(elsewhere.parent))
    assert adopt_built_deepspeed_ops() == []
    (elsewhere.parent / "versions.txt").write_text("python cpython-311\ntorch==0.0.1\n")
    assert adopt_built_deepspeed_ops() == []
    # The keyed folder, with a file that does not load: DeepSpeed builds its own.
    monkeypatch.delenv("TORCH_EXTENSIONS_DIR")
    broken = torch_extensions_dir() / "deepspeed_shm_comm"
    broken.mkdir()
    (broken / "deepspeed_shm_comm.so").write_bytes(b"half-written")
    assert adopt_built_deepspeed_ops() == []
