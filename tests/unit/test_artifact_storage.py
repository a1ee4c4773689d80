from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from service.artifacts.storage import READ_CHUNK_BYTES, LocalArtifactStore, S3ArtifactStore
from tests.moto_s3 import CREDENTIALS, moto_s3_server


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    with moto_s3_server() as url:
        yield url


@pytest.fixture
def store(s3_endpoint: str) -> S3ArtifactStore:
    client = boto3.client(
        "s3",
        endpoint_url=s3_endpoint,
        region_name="us-east-1",
        aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
    )
    client.create_bucket(Bucket="artifacts")
    return S3ArtifactStore("artifacts", prefix="rft", client=client)


def make_checkpoint(root: Path) -> Path:
    (root / "nested").mkdir(parents=True)
    (root / "adapter_config.json").write_text('{"r": 16}')
    (root / "adapter_model.safetensors").write_bytes(bytes(range(256)) * 64)
    (root / "nested" / "rng_state.pth").write_bytes(b"rng")
    return root


def test_s3_round_trip_keeps_every_file(store: S3ArtifactStore, tmp_path: Path) -> None:
    source = make_checkpoint(tmp_path / "checkpoint-5")
    uri = store.save_directory(source, "job_1/checkpoint-5")
    assert uri == "s3://artifacts/rft/job_1/checkpoint-5"
    assert store.exists(uri)
    assert not store.exists("s3://artifacts/rft/job_1/checkpoint-6")

    fetched = store.fetch_directory(uri, tmp_path / "restored")
    for path in source.rglob("*"):
        if path.is_file():
            assert (fetched / path.relative_to(source)).read_bytes() == path.read_bytes()
    assert not (tmp_path / "restored.partial").exists()


def test_local_store_records_the_folder_itself(tmp_path: Path) -> None:
    source = make_checkpoint(tmp_path / "checkpoint-1")
    store = LocalArtifactStore(tmp_path)
    uri = store.save_directory(source, "ignored")
    assert Path(uri) == source.resolve() and store.exists(uri)
    assert store.fetch_directory(uri, tmp_path / "unused") == Path(uri)


def test_s3_copies_named_files_to_a_new_key(store: S3ArtifactStore, tmp_path: Path) -> None:
    uri = store.save_directory(make_checkpoint(tmp_path / "checkpoint-5"), "job_1/checkpoint-5")
    assert store.top_level_files(uri) == {"adapter_config.json", "adapter_model.safetensors"}

    copy = store.copy_files(uri, ["adapter_config.json"], "job_2/initial-adapter")
    assert copy == "s3://artifacts/rft/job_2/initial-adapter"
    assert store.top_level_files(copy) == {"adapter_config.json"}
    fetched = store.fetch_directory(copy, tmp_path / "fetched")
    assert (fetched / "adapter_config.json").read_text() == '{"r": 16}'


def test_local_store_copies_named_files_under_its_root(tmp_path: Path) -> None:
    source = make_checkpoint(tmp_path / "job_1" / "checkpoint-1")
    store = LocalArtifactStore(tmp_path)
    assert store.top_level_files(str(source)) == {
        "adapter_config.json",
        "adapter_model.safetensors",
    }
    copy = store.copy_files(str(source), ["adapter_model.safetensors"], "job_2/initial-adapter")
    assert Path(copy) == (tmp_path / "job_2" / "initial-adapter").resolve()
    assert [path.name for path in Path(copy).iterdir()] == ["adapter_model.safetensors"]
    assert (Path(copy) / "adapter_model.safetensors").read_bytes() == (
        source / "adapter_model.safetensors"
    ).read_bytes()
    assert not (tmp_path / "job_2" / "initial-adapter.partial").exists()


def test_a_file_round_trips_through_s3_in_pieces(store: S3ArtifactStore, tmp_path: Path) -> None:
    archive = tmp_path / "exp_1.tar.gz"
    archive.write_bytes(bytes(range(256)) * 9000)  # > 2 reads of READ_CHUNK_BYTES
    uri = store.save_file(archive, "job_1/exports/exp_1.tar.gz")
    assert uri == "s3://artifacts/rft/job_1/exports/exp_1.tar.gz"
    assert store.file_size(uri) == archive.stat().st_size
    assert store.file_size("s3://artifacts/rft/job_1/exports/exp_2.tar.gz") is None
    pieces = list(store.read_file(uri))
    assert len(pieces) == 3 and max(len(piece) for piece in pieces) == READ_CHUNK_BYTES
    assert b"".join(pieces) == archive.read_bytes()


def test_the_local_store_keeps_a_file_where_it_is(tmp_path: Path) -> None:
    archive = tmp_path / "exp_1.tar.gz"
    archive.write_bytes(b"x" * (READ_CHUNK_BYTES + 1))
    store = LocalArtifactStore(tmp_path)
    uri = store.save_file(archive, "ignored")
    assert Path(uri) == archive.resolve() and store.file_size(uri) == READ_CHUNK_BYTES + 1
    assert store.file_size(str(tmp_path / "missing.tar.gz")) is None
    assert [len(piece) for piece in store.read_file(uri)] == [READ_CHUNK_BYTES, 1]


def test_s3_deletes_a_file_and_a_file_already_gone(store: S3ArtifactStore, tmp_path: Path) -> None:
    archive = tmp_path / "exp_1.tar.gz"
    archive.write_bytes(b"merged")
    uri = store.save_file(archive, "job_1/exports/exp_1.tar.gz")
    kept = store.save_file(archive, "job_1/exports/exp_2.tar.gz")
    store.delete_file(uri)
    assert store.file_size(uri) is None
    store.delete_file(uri)  # a retried delete finishes without an error
    assert store.file_size(kept) == len(b"merged")


def test_the_local_store_deletes_a_file_and_a_file_already_gone(tmp_path: Path) -> None:
    archive = tmp_path / "exp_1.tar.gz"
    archive.write_bytes(b"merged")
    kept = tmp_path / "exp_2.tar.gz"
    kept.write_bytes(b"merged")
    store = LocalArtifactStore(tmp_path)
    uri = store.save_file(archive, "ignored")
    store.delete_file(uri)
    assert not archive.exists() and store.file_size(uri) is None
    store.delete_file(uri)
    assert kept.read_bytes() == b"merged"
