"""Base models: the built-in ``rft-tiny`` downloads, so its adapters load away from the server."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import quote

from rft.resources.adapter_archive import (
    archive_name,
    archive_request,
    save_archive,
    save_archive_async,
)
from rft.transport import AsyncTransport, SyncTransport


def _download_path(name: str) -> str:
    return f"/v1/models/{quote(name, safe='')}/download"


class Models:
    def __init__(self, transport: SyncTransport) -> None:
        self._transport = transport

    def download(
        self, name: str, /, destination: str | os.PathLike[str], *, extract: bool = True
    ) -> Path:
        """Save the base model ``name`` (only ``rft-tiny`` is served) under ``destination``.

        Streamed to disk. Returns the unpacked model folder ``destination/rft-tiny`` (load it
        with ``from_pretrained``; from ``destination``, an adapter of a job on rft-tiny loads
        with ``AutoPeftModelForCausalLM.from_pretrained``), or with ``extract=False`` the
        ``.tar.gz`` itself.
        """
        with self._transport.stream(archive_request(_download_path(name))) as response:
            saved_as = archive_name(response.response.headers.get("Content-Disposition"), name)
            return save_archive(response.iter_bytes(), destination, saved_as, extract=extract)


class AsyncModels:
    def __init__(self, transport: AsyncTransport) -> None:
        self._transport = transport

    async def download(
        self, name: str, /, destination: str | os.PathLike[str], *, extract: bool = True
    ) -> Path:
        """See :meth:`Models.download`."""
        async with self._transport.stream(archive_request(_download_path(name))) as response:
            saved_as = archive_name(response.response.headers.get("Content-Disposition"), name)
            return await save_archive_async(
                response.aiter_bytes(), destination, saved_as, extract=extract
            )
