"""Adapter downloads: a ``.tar.gz`` streamed to disk chunk by chunk, then (by default) unpacked.

The server packs a PEFT adapter as ``NAME/adapter_config.json``, ``NAME/adapter_model...``; the
unpacked ``DESTINATION/NAME`` directory loads with ``PeftModel.from_pretrained``. An adapter of
a real model is hundreds of MB, so the body is never held in memory.
"""

from __future__ import annotations

import os
import re
import tarfile
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

from rft.errors import RFTError
from rft.transport import AsyncTransport, RequestOptions, SyncTransport

ARCHIVE_SUFFIX = ".tar.gz"
_FILENAME = re.compile(r'filename="?([^";]+)"?')


def archive_request(path: str) -> RequestOptions:
    return RequestOptions("GET", path, headers={"Accept": "application/gzip"})


def archive_name(content_disposition: str | None, fallback: str) -> str:
    """The archive's name without ``.tar.gz``: the server's filename, reduced to a safe name."""
    match = _FILENAME.search(content_disposition or "")
    name = Path(match.group(1)).name if match else fallback
    name = name.removesuffix(ARCHIVE_SUFFIX)
    return name if re.fullmatch(r"[\w.-]+", name) and name not in (".", "..") else fallback


class ArchiveWriter:
    """Receives the body's chunks into a temporary file beside the destination, then moves the
    archive into place or unpacks it: an interrupted download leaves nothing half-written."""

    def __init__(self, destination: str | os.PathLike[str], name: str, *, extract: bool) -> None:
        self.directory = Path(destination)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.name = name
        self.extract = extract
        handle, temporary = tempfile.mkstemp(dir=self.directory, prefix=f".{name}.", suffix=".part")
        self._file = os.fdopen(handle, "wb")
        self._temporary = Path(temporary)

    def write(self, chunk: bytes) -> None:
        self._file.write(chunk)

    def finish(self) -> Path:
        """The adapter directory (``extract``) or the archive file."""
        self._file.close()
        try:
            if not self.extract:
                target = self.directory / f"{self.name}{ARCHIVE_SUFFIX}"
                self._temporary.replace(target)
                return target
            return _unpack(self._temporary, self.directory, self.name)
        finally:
            self._temporary.unlink(missing_ok=True)

    def abandon(self) -> None:
        self._file.close()
        self._temporary.unlink(missing_ok=True)


def _unpack(archive_path: Path, directory: Path, name: str) -> Path:
    with tarfile.open(archive_path, "r:gz") as archive:
        members = archive.getmembers()
        for member in members:
            # Only plain files and folders under NAME/: an archive is data from the network.
            parts = Path(member.name).parts
            if (
                not (member.isfile() or member.isdir())
                or Path(member.name).is_absolute()
                or ".." in parts
                or not parts
                or parts[0] != name
            ):
                raise RFTError(f"the adapter archive holds an unexpected entry {member.name!r}")
        if hasattr(tarfile, "data_filter"):
            archive.extractall(directory, members=members, filter="data")
        else:  # Python < 3.11.4: the members were checked above
            archive.extractall(directory, members=members)
    return directory / name


def save_archive(
    chunks: Iterator[bytes], destination: str | os.PathLike[str], name: str, *, extract: bool
) -> Path:
    writer = ArchiveWriter(destination, name, extract=extract)
    try:
        for chunk in chunks:
            writer.write(chunk)
    except BaseException:
        writer.abandon()
        raise
    return writer.finish()


async def save_archive_async(
    chunks: AsyncIterator[bytes],
    destination: str | os.PathLike[str],
    name: str,
    *,
    extract: bool,
) -> Path:
    writer = ArchiveWriter(destination, name, extract=extract)
    try:
        async for chunk in chunks:
            writer.write(chunk)
    except BaseException:
        writer.abandon()
        raise
    return writer.finish()


def download_archive(
    transport: SyncTransport,
    path: str,
    fallback_name: str,
    destination: str | os.PathLike[str],
    extract: bool,
) -> Path:
    """Stream the archive at ``path`` into ``destination``, named as the server names it."""
    with transport.stream(archive_request(path)) as response:
        name = archive_name(response.response.headers.get("Content-Disposition"), fallback_name)
        return save_archive(response.iter_bytes(), destination, name, extract=extract)


async def download_archive_async(
    transport: AsyncTransport,
    path: str,
    fallback_name: str,
    destination: str | os.PathLike[str],
    extract: bool,
) -> Path:
    """See :func:`download_archive`."""
    async with transport.stream(archive_request(path)) as response:
        name = archive_name(response.response.headers.get("Content-Disposition"), fallback_name)
        return await save_archive_async(response.aiter_bytes(), destination, name, extract=extract)
