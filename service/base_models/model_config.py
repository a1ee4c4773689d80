"""A base model's ``config.json`` (and the size of its safetensors checkpoint), read where the
API can: a local model directory, or the hub. For the GPU-memory check at job creation
(service.gpu.job_fit); a model whose files cannot be read here is simply not checked.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from service.base_models.service import BUILT_IN_MODELS
from service.gpu.memory_plan import CONFIG_FILE, INDEX_FILE, checkpoint_bytes
from service.settings import Settings

logger = logging.getLogger(__name__)

MAX_FILE_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class ModelFiles:
    config: dict[str, Any]
    checkpoint_bytes: int | None  # the index's metadata.total_size; None without an index


def read_model_files(name: str, settings: Settings) -> ModelFiles | None:
    """``name``'s config (a base_model that passed check_base_model), or None when it cannot
    be read here: the built-in model, a path only the workers have, the hub unreachable or
    not to be asked (RFT_HUB_CHECK=off)."""
    if name in BUILT_IN_MODELS:
        return None
    try:
        if name.startswith("/"):
            return _local(Path(name))
        if settings.hub_check == "off":
            return None
        return _from_hub(name, settings)
    except Exception as exc:  # unreadable here: the job is not checked, nothing more
        logger.info("could not read the config of base model %r: %s", name, exc)
        return None


def _local(directory: Path) -> ModelFiles | None:
    config_path = directory / CONFIG_FILE
    if not config_path.is_file():
        return None
    config = _parse(config_path.read_bytes()[:MAX_FILE_BYTES])
    index_path = directory / INDEX_FILE
    index = _parse(index_path.read_bytes()[:MAX_FILE_BYTES]) if index_path.is_file() else None
    return ModelFiles(config, checkpoint_bytes(index))


def _from_hub(repo_id: str, settings: Settings) -> ModelFiles | None:
    import httpx
    from huggingface_hub import constants, hf_hub_url
    from huggingface_hub.utils import build_hf_headers

    endpoint = settings.hub_endpoint or constants.ENDPOINT
    headers = build_hf_headers()
    with httpx.Client(
        timeout=settings.hub_check_timeout_s, follow_redirects=True, headers=headers
    ) as client:

        def fetch(filename: str) -> dict[str, Any] | None:
            response = client.get(hf_hub_url(repo_id, filename, endpoint=endpoint))
            if response.status_code != 200:
                return None
            return _parse(response.content[:MAX_FILE_BYTES])

        config = fetch(CONFIG_FILE)
        if config is None:
            return None
        return ModelFiles(config, checkpoint_bytes(fetch(INDEX_FILE)))


def _parse(content: bytes) -> dict[str, Any]:
    parsed = json.loads(content)
    if not isinstance(parsed, dict):
        raise ValueError("not a JSON object")
    return parsed
