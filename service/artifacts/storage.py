"""Where checkpoints and adapters live: a local folder (the default, a shared volume in
Docker) or an S3-compatible bucket. Training always writes locally first (TRL saves to a
folder); the store is what survives the machine."""

from __future__ import annotations

import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Protocol

from service.settings import Settings

S3_SCHEME = "s3://"
# A PEFT adapter is these files (a folder's top level); optimizer, scheduler and RNG state
# stay on the server (they are for resuming, not for serving).
ADAPTER_FILES = (
    "adapter_config.json",
    "adapter_model.safetensors",
    "adapter_model.bin",
    "README.md",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
)
# What a checkpoint keeps of the optimizer when one process holds all of it (DDP; DeepSpeed and
# FSDP keep theirs in shards of their own).
OPTIMIZER_FILE = "optimizer.pt"
# Reads of a stored file (an export's archive, served to a download) come in pieces this size.
READ_CHUNK_BYTES = 1024 * 1024


class ArtifactStore(Protocol):
    def save_directory(self, local: Path, key: str) -> str:
        """Keep ``local`` under ``key``; returns the URI to record."""
        ...

    def fetch_directory(self, uri: str, destination: Path) -> Path:
        """A local folder holding the artifact at ``uri`` (maybe ``destination``)."""
        ...

    def exists(self, uri: str) -> bool: ...

    def top_level_files(self, uri: str) -> set[str]:
        """The names of the files directly in the artifact at ``uri``."""
        ...

    def copy_files(self, uri: str, names: Iterable[str], key: str) -> str:
        """Copy the files ``names`` of the artifact at ``uri`` to a new artifact under
        ``key``, whole or not at all; returns its URI."""
        ...

    def save_file(self, local: Path, key: str) -> str:
        """Keep the file ``local`` under ``key``; returns the URI to record."""
        ...

    def file_size(self, uri: str) -> int | None:
        """The stored file's size; None when it is not there."""
        ...

    def read_file(self, uri: str) -> Iterator[bytes]:
        """The stored file's bytes, a piece at a time (never all of it in memory)."""
        ...

    def delete_file(self, uri: str) -> None:
        """Remove the stored file; one already gone is no error (a retried delete, or a
        store emptied by hand, finishes what was asked)."""
        ...


def _read_local(path: Path) -> Iterator[bytes]:
    with path.open("rb") as handle:
        while chunk := handle.read(READ_CHUNK_BYTES):
            yield chunk


class LocalArtifactStore:
    """Artifacts stay where training wrote them, under RFT_ARTIFACTS_DIR (``root``)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def save_directory(self, local: Path, key: str) -> str:
        return str(local.resolve())

    def fetch_directory(self, uri: str, destination: Path) -> Path:
        return Path(uri)

    def exists(self, uri: str) -> bool:
        return Path(uri).is_dir()

    def top_level_files(self, uri: str) -> set[str]:
        return {path.name for path in Path(uri).iterdir() if path.is_file()}

    def copy_files(self, uri: str, names: Iterable[str], key: str) -> str:
        destination = (self.root / key).resolve()
        partial = destination.with_name(destination.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        for name in names:
            shutil.copy2(Path(uri) / name, partial / name)
        shutil.rmtree(destination, ignore_errors=True)
        partial.rename(destination)
        return str(destination)

    def save_file(self, local: Path, key: str) -> str:
        return str(local.resolve())

    def file_size(self, uri: str) -> int | None:
        path = Path(uri)
        return path.stat().st_size if path.is_file() else None

    def read_file(self, uri: str) -> Iterator[bytes]:
        return _read_local(Path(uri))

    def delete_file(self, uri: str) -> None:
        Path(uri).unlink(missing_ok=True)


class S3ArtifactStore:
    def __init__(
        self,
        bucket: str,
        *,
        prefix: str = "",
        endpoint_url: str | None = None,
        client: Any = None,
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
        region: str | None = None,
    ) -> None:
        if client is None:
            import boto3

            client = boto3.client(
                "s3",
                endpoint_url=endpoint_url,
                aws_access_key_id=access_key_id,
                aws_secret_access_key=secret_access_key,
                region_name=region,
            )
        self.client = client
        self.bucket = bucket
        self.prefix = prefix.strip("/")

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def _split(self, uri: str) -> tuple[str, str]:
        bucket, _, key = uri.removeprefix(S3_SCHEME).partition("/")
        return bucket, key

    def save_directory(self, local: Path, key: str) -> str:
        root = self._key(key)
        for path in sorted(local.rglob("*")):
            if path.is_file():
                relative = path.relative_to(local).as_posix()
                self.client.upload_file(str(path), self.bucket, f"{root}/{relative}")
        return f"{S3_SCHEME}{self.bucket}/{root}"

    def _objects(self, uri: str) -> list[str]:
        bucket, root = self._split(uri)
        keys: list[str] = []
        for page in self.client.get_paginator("list_objects_v2").paginate(
            Bucket=bucket, Prefix=f"{root}/"
        ):
            keys.extend(item["Key"] for item in page.get("Contents", []))
        return keys

    def fetch_directory(self, uri: str, destination: Path) -> Path:
        bucket, root = self._split(uri)
        partial = destination.with_name(destination.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        for key in self._objects(uri):
            target = partial / key.removeprefix(f"{root}/")
            target.parent.mkdir(parents=True, exist_ok=True)
            self.client.download_file(bucket, key, str(target))
        # Whole or nothing: a download cut short never looks like a checkpoint.
        shutil.rmtree(destination, ignore_errors=True)
        partial.rename(destination)
        return destination

    def exists(self, uri: str) -> bool:
        return bool(self._objects(uri))

    def top_level_files(self, uri: str) -> set[str]:
        _, root = self._split(uri)
        relative = (key.removeprefix(f"{root}/") for key in self._objects(uri))
        return {name for name in relative if "/" not in name}

    def copy_files(self, uri: str, names: Iterable[str], key: str) -> str:
        # Server-side copies: the bytes never pass through this machine. A reader goes by the
        # database row, written after the copy, so a copy cut short is never read.
        bucket, root = self._split(uri)
        target = self._key(key)
        for name in names:
            self.client.copy(
                {"Bucket": bucket, "Key": f"{root}/{name}"}, self.bucket, f"{target}/{name}"
            )
        return f"{S3_SCHEME}{self.bucket}/{target}"

    def save_file(self, local: Path, key: str) -> str:
        # upload_file sends a large file in parts (multipart), from disk.
        self.client.upload_file(str(local), self.bucket, self._key(key))
        return f"{S3_SCHEME}{self.bucket}/{self._key(key)}"

    def file_size(self, uri: str) -> int | None:
        from botocore.exceptions import ClientError

        bucket, key = self._split(uri)
        try:
            return int(self.client.head_object(Bucket=bucket, Key=key)["ContentLength"])
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return None
            raise

    def read_file(self, uri: str) -> Iterator[bytes]:
        bucket, key = self._split(uri)
        body = self.client.get_object(Bucket=bucket, Key=key)["Body"]
        try:
            yield from body.iter_chunks(READ_CHUNK_BYTES)
        finally:
            body.close()

    def delete_file(self, uri: str) -> None:
        # S3 answers a key that is not there with success too.
        bucket, key = self._split(uri)
        self.client.delete_object(Bucket=bucket, Key=key)


def artifact_store(settings: Settings) -> ArtifactStore:
    if settings.artifact_store == "s3":
        if not settings.s3_bucket:
            raise RuntimeError("RFT_ARTIFACT_STORE=s3 needs RFT_S3_BUCKET")
        return S3ArtifactStore(
            settings.s3_bucket,
            prefix=settings.s3_prefix,
            endpoint_url=settings.s3_endpoint_url,
            access_key_id=settings.s3_access_key_id,
            secret_access_key=(
                settings.s3_secret_access_key.get_secret_value()
                if settings.s3_secret_access_key
                else None
            ),
            region=settings.s3_region,
        )
    return LocalArtifactStore(settings.resolved_artifacts_dir)


def fetch_for_reading(store: ArtifactStore, uri: str, scratch: Path) -> Path:
    """A local folder to read the artifact from: the folder itself when it is local."""
    if uri.startswith(S3_SCHEME):
        return store.fetch_directory(uri, scratch / "artifact")
    return Path(uri)
