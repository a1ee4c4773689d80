"""The built-in tiny base model as a download, so adapters trained on it load anywhere.

Hub models come from the hub; ``rft-tiny`` exists only on this service's machines. It is built
on demand, like a worker builds it (``service.base_models.built_in.tiny_model``), which needs
the training stack (torch, transformers): an API installed without the worker extra answers 503
unless the model cache it shares with the workers already holds the build.
"""

from __future__ import annotations

import os
import tarfile
import tempfile
from pathlib import Path

from service.base_models.service import TINY_MODEL_NAME
from service.errors import NotFound, ServiceUnavailable
from service.settings import Settings


class BaseModelNotDownloadable(NotFound):
    pass


class TinyModelUnavailable(ServiceUnavailable):
    pass


def base_model_archive(name: str, settings: Settings) -> Path:
    """A .tar.gz holding ``NAME/config.json``, ``NAME/model.safetensors``, the tokenizer...

    Unpacked into a folder, ``from_pretrained("rft-tiny")`` run there loads it, so does an
    adapter whose config names ``rft-tiny`` as its base. Built once and kept in the model cache.
    """
    if name != TINY_MODEL_NAME:
        raise BaseModelNotDownloadable(
            f"only the built-in model {TINY_MODEL_NAME!r} can be downloaded here; {name!r} "
            "comes from where it was given (the Hugging Face hub, or the workers' disk)"
        )
    try:
        from service.base_models.built_in.tiny_model import ensure_tiny_model

        directory = ensure_tiny_model(settings.resolved_model_cache_dir)
    except ImportError as exc:
        raise TinyModelUnavailable(
            f"{TINY_MODEL_NAME} cannot be built on this API server ({exc}): install the "
            "worker extra here, or share the workers' model cache (RFT_MODEL_CACHE_DIR) after "
            "a job on it has run"
        ) from None
    archive = directory.with_name(f"{directory.name}.tar.gz")
    if not archive.is_file():
        _pack(directory, archive)
    return archive


def _pack(directory: Path, archive: Path) -> None:
    # Written beside the target and renamed: two requests at once never serve a partial file.
    handle, temporary = tempfile.mkstemp(dir=archive.parent, prefix=f".{archive.name}.")
    os.close(handle)
    try:
        with tarfile.open(temporary, "w:gz") as packed:
            for path in sorted(directory.iterdir()):
                if path.is_file():
                    packed.add(path, arcname=f"{TINY_MODEL_NAME}/{path.name}")
        os.replace(temporary, archive)
    finally:
        Path(temporary).unlink(missing_ok=True)
