"""Server filesystem paths never reach API clients: text bound for them (job events, failure
reasons) names a server folder by its role instead, e.g. ``<artifacts>/job_1/checkpoint-3``.

Where a deployment keeps its state, its code and its Python says something about the host
that a tenant has no use for, and exception messages (a model that failed to load, a full
disk) quote such paths freely.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Any

from service.settings import Settings, get_settings

CODE_ROOT = Path(__file__).resolve().parent.parent


def server_folders(settings: Settings) -> dict[str, str]:
    """Folder -> the name shown instead. Nested folders are replaced before their parents."""
    named = {
        "<artifacts>": settings.resolved_artifacts_dir,
        "<models>": settings.resolved_model_cache_dir,
        "<state>": settings.state_dir.resolve(),
        "<server>": CODE_ROOT,
        "<python>": Path(sys.prefix).resolve(),
        "<python base>": Path(sys.base_prefix).resolve(),
        "<tmp>": Path(tempfile.gettempdir()).resolve(),
        "<home>": Path(os.path.expanduser("~")),
    }
    folders: dict[str, str] = {}
    paths = [*named.items(), *(("<python packages>", path) for path in _outside_packages())]
    for name, path in paths:
        text = str(path)
        if text not in ("/", "~"):
            folders.setdefault(text, name)
    return folders


def _outside_packages() -> list[Path]:
    """The site-packages folders on sys.path outside this environment: a dependency environment
    shared by checkouts (scripts/python_env.sh), named for what it holds."""
    prefix = Path(sys.prefix).resolve()
    folders = []
    for entry in sys.path:
        folder = Path(entry).resolve()
        if folder.name == "site-packages" and not folder.is_relative_to(prefix):
            folders.append(folder)
    return folders


@lru_cache(maxsize=4)
def _pattern(folders: tuple[tuple[str, str], ...]) -> re.Pattern[str]:
    # Longest first, and only whole path components: /tmp must not match /tmpfiles.
    alternatives = sorted((re.escape(folder) for folder, _ in folders), key=len, reverse=True)
    return re.compile(rf"(?:{'|'.join(alternatives)})(?![\w.-])")


def hide_server_paths(text: str, settings: Settings | None = None) -> str:
    folders = server_folders(settings or get_settings())
    pattern = _pattern(tuple(sorted(folders.items())))
    return pattern.sub(lambda match: folders[match.group(0)], text)


def hide_paths_in(value: Any, settings: Settings | None = None) -> Any:
    """``hide_server_paths`` applied to every string of a JSON-like value."""
    if isinstance(value, str):
        return hide_server_paths(value, settings)
    if isinstance(value, dict):
        return {key: hide_paths_in(item, settings) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [hide_paths_in(item, settings) for item in value]
    return value
