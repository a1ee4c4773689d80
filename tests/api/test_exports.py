"""Exports over the API without a worker building them: who may ask, and what is refused.
(tests/integration/test_exports.py builds, downloads and pushes them.)"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.exports.status import ExportStatus
from service.stack import LocalStack
from tests.export_rows import ExportRows
from tests.tiny import TINY_HYPERPARAMETERS

SOURCE = "def f(prompt, completion, example):\n    return 1.0\n"


@pytest.fixture
def cancelled_job(client: httpx.Client) -> dict[str, Any]:
    """A job that never trained (cancelled at once: it has no adapter), with one secret."""
    rows = "\n".join(json.dumps({"prompt": f"p{i}"}) for i in range(4)).encode()
    dataset = client.post("/v1/datasets", files={"file": ("d.jsonl", rows)}).json()
    job = client.post(
        "/v1/jobs",
        json={
            "dataset_id": dataset["id"],
            "reward_functions": {"f": {"source": SOURCE}},
            "hyperparameters": {**TINY_HYPERPARAMETERS, "train_steps": 1},
            "secrets": {"JUDGE_KEY": "not-a-hub-token"},
        },
    ).json()
    assert client.post(f"/v1/jobs/{job['id']}/cancel").json()["status"] == "cancelled"
    return dict(job)


@pytest.fixture
def rows(stack: LocalStack, cancelled_job: dict[str, Any], tmp_path: Path) -> Iterator[ExportRows]:
    """Exports of ``cancelled_job`` in any state, with no worker building them."""
    rows = ExportRows(stack, cancelled_job["id"], tmp_path)
    yield rows
    rows.close()


def test_a_job_without_an_adapter_is_409_saying_what_to_export_instead(
    client: httpx.Client, cancelled_job: dict[str, Any]
) -> None:
    job_id = cancelled_job["id"]
    for response in (
        client.post(f"/v1/jobs/{job_id}/exports", json={"kind": "merged"}),
        client.get(f"/v1/jobs/{job_id}/merged.tar.gz"),
    ):
        assert response.status_code == 409, response.text
        assert response.json()["error"] == "AdapterNotReady"
        assert f"job {job_id} has no final adapter: it is cancelled" in response.json()["detail"]
        assert "checkpoint_step" in response.json()["detail"]
    assert client.get(f"/v1/jobs/{job_id}/exports").json() == {"data": []}


def test_a_checkpoint_the_job_does_not_have_is_404(
    client: httpx.Client, cancelled_job: dict[str, Any]
) -> None:
    job_id = cancelled_job["id"]
    for response in (
        client.post(f"/v1/jobs/{job_id}/exports", json={"checkpoint_step": 7}),
        client.get(f"/v1/jobs/{job_id}/checkpoints/7/merged.tar.gz"),
    ):
        assert response.status_code == 404, response.text
        assert "has no checkpoint at step 7" in response.json()["detail"]
    for missing in (
        client.get(f"/v1/jobs/{job_id}/exports/exp_nope"),
        client.delete(f"/v1/jobs/{job_id}/exports/exp_nope"),
    ):
        assert missing.status_code == 404, missing.text
        assert missing.json()["detail"] == f"job {job_id} has no export 'exp_nope'"


def test_a_hub_token_secret_the_job_does_not_have_is_400_naming_its_secrets(
    client: httpx.Client, cancelled_job: dict[str, Any]
) -> None:
    response = client.post(
        f"/v1/jobs/{cancelled_job['id']}/exports",
        json={"kind": "adapter", "hub": {"repo_id": "me/model", "token_secret": "HF_TOKEN"}},
    )
    assert response.status_code == 400, response.text
    assert "no secret named 'HF_TOKEN' (its secrets: ['JUDGE_KEY'])" in response.json()["detail"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"kind": "adapter"}, "an adapter export needs a hub destination"),
        (
            {"kind": "adapter", "dtype": "bfloat16", "hub": {"repo_id": "a/b", "token": "t"}},
            "dtype applies to merged exports only",
        ),
        ({"dtype": "int8"}, "dtype"),
        ({"checkpoint_step": -1}, "checkpoint_step"),
        ({"format": "gguf"}, "format"),
        ({"hub": {"repo_id": "a/b"}}, "exactly one of token_secret or token"),
        (
            {"hub": {"repo_id": "a/b", "token": "t", "token_secret": "HF_TOKEN"}},
            "exactly one of token_secret or token",
        ),
        ({"hub": {"repo_id": "no-namespace", "token": "t"}}, "repo_id"),
        ({"hub": {"repo_id": "a/b", "token_secret": "not a name"}}, "token_secret"),
    ],
)
def test_a_bad_body_is_422_naming_the_problem(
    client: httpx.Client, cancelled_job: dict[str, Any], body: dict[str, Any], message: str
) -> None:
    response = client.post(f"/v1/jobs/{cancelled_job['id']}/exports", json=body)
    assert response.status_code == 422, response.text
    assert message in response.text


def test_another_tenants_job_has_no_exports_to_see_or_make(
    other_client: httpx.Client, cancelled_job: dict[str, Any]
) -> None:
    job_id = cancelled_job["id"]
    for method, path, body in [
        ("POST", f"/v1/jobs/{job_id}/exports", {"kind": "merged"}),
        ("GET", f"/v1/jobs/{job_id}/exports", None),
        ("GET", f"/v1/jobs/{job_id}/exports/exp_nope", None),
        ("DELETE", f"/v1/jobs/{job_id}/exports/exp_nope", None),
        ("GET", f"/v1/jobs/{job_id}/merged.tar.gz", None),
        ("GET", f"/v1/jobs/{job_id}/checkpoints/1/merged.tar.gz", None),
    ]:
        response = other_client.request(method, path, json=body)
        assert response.status_code == 404, (path, response.text)
        assert response.json() == {"error": "NotFound", "detail": f"job {job_id!r} not found"}


def test_deleting_a_built_export_removes_its_archive_and_its_row(
    client: httpx.Client, rows: ExportRows
) -> None:
    rows.give_adapter()
    export_id, archive = rows.add(ExportStatus.SUCCEEDED, archive=b"merged weights")
    assert archive is not None
    job_id = rows.job_id
    export_path = f"/v1/jobs/{job_id}/exports/{export_id}"
    download = client.get(f"/v1/jobs/{job_id}/merged.tar.gz")
    assert download.status_code == 200 and download.content == b"merged weights"

    deleted = client.delete(export_path)
    assert deleted.status_code == 204, deleted.text
    assert deleted.content == b""
    assert not archive.exists()
    assert rows.status(export_id) is None
    assert client.get(export_path).status_code == 404
    assert client.get(f"/v1/jobs/{job_id}/exports").json() == {"data": []}
    download = client.get(f"/v1/jobs/{job_id}/merged.tar.gz")
    assert download.status_code == 409, download.text
    assert download.json()["error"] == "ExportNotBuilt"
    assert "has been built" in download.json()["detail"]

    again = client.delete(export_path)
    assert again.status_code == 404, again.text
    assert again.json()["detail"] == f"job {job_id} has no export {export_id!r}"


@pytest.mark.parametrize("status", [ExportStatus.QUEUED, ExportStatus.RUNNING])
def test_an_export_still_building_is_409_and_stays(
    client: httpx.Client, rows: ExportRows, status: ExportStatus
) -> None:
    export_id, _ = rows.add(status)
    response = client.delete(f"/v1/jobs/{rows.job_id}/exports/{export_id}")
    assert response.status_code == 409, response.text
    assert response.json()["error"] == "ExportStillBuilding"
    detail = response.json()["detail"]
    assert f"export {export_id} is {status.value}" in detail and "wait for it" in detail
    assert rows.status(export_id) == status.value
    assert client.get(f"/v1/jobs/{rows.job_id}/exports/{export_id}").status_code == 200


def test_an_ended_export_without_an_archive_in_the_store_is_deleted_too(
    client: httpx.Client, rows: ExportRows
) -> None:
    failed, _ = rows.add(ExportStatus.FAILED)
    pushed, _ = rows.add(ExportStatus.SUCCEEDED, hub_repo="me/model")
    vanished, archive = rows.add(ExportStatus.SUCCEEDED, archive=b"x")
    assert archive is not None
    archive.unlink()  # e.g. removed from the store by hand
    kept, kept_archive = rows.add(ExportStatus.SUCCEEDED, archive=b"kept")
    for export_id in (failed, pushed, vanished):
        response = client.delete(f"/v1/jobs/{rows.job_id}/exports/{export_id}")
        assert response.status_code == 204, response.text
        assert rows.status(export_id) is None
    listed = client.get(f"/v1/jobs/{rows.job_id}/exports").json()["data"]
    assert [export["id"] for export in listed] == [kept]
    assert kept_archive is not None and kept_archive.read_bytes() == b"kept"


def test_another_tenants_export_cannot_be_deleted(
    other_client: httpx.Client, rows: ExportRows
) -> None:
    export_id, archive = rows.add(ExportStatus.SUCCEEDED, archive=b"theirs")
    response = other_client.delete(f"/v1/jobs/{rows.job_id}/exports/{export_id}")
    assert response.status_code == 404, response.text
    assert response.json() == {"error": "NotFound", "detail": f"job {rows.job_id!r} not found"}
    assert rows.status(export_id) == ExportStatus.SUCCEEDED.value
    assert archive is not None and archive.read_bytes() == b"theirs"
