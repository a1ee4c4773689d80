"""The built-in model's download: only rft-tiny, built once, a 503 where it cannot be built."""

from __future__ import annotations

import sys
import tarfile
from pathlib import Path

import pytest

from service.base_models.download import (
    BaseModelNotDownloadable,
    TinyModelUnavailable,
    base_model_archive,
)
from service.settings import Settings


def settings(tmp_path: Path) -> Settings:
    return Settings(model_cache_dir=tmp_path / "models")


def test_other_models_are_not_served(tmp_path: Path) -> None:
    with pytest.raises(BaseModelNotDownloadable, match="only the built-in model 'rft-tiny'"):
        base_model_archive("Qwen/Qwen2.5-0.5B", settings(tmp_path))


def test_an_api_without_the_training_stack_says_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The import fails, as without torch and transformers.
    monkeypatch.setitem(sys.modules, "service.base_models.built_in.tiny_model", None)
    with pytest.raises(TinyModelUnavailable, match="install the worker extra"):
        base_model_archive("rft-tiny", settings(tmp_path))


def test_the_archive_is_built_once_under_rft_tiny(tmp_path: Path) -> None:
    archive = base_model_archive("rft-tiny", settings(tmp_path))
    with tarfile.open(archive) as packed:
        names = packed.getnames()
    assert "rft-tiny/config.json" in names and "rft-tiny/model.safetensors" in names
    assert all(name.startswith("rft-tiny/") for name in names)
    built = archive.stat().st_mtime_ns
    assert base_model_archive("rft-tiny", settings(tmp_path)) == archive
    assert archive.stat().st_mtime_ns == built
