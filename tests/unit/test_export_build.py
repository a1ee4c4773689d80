"""The parts of an export around the merge (workers.export): the archive, and the hub push
against a fake hub (the true outside edge)."""

from __future__ import annotations

import tarfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from service.embedded import free_port
from service.work_queue.celery_app import EXPORTS_QUEUE, worker_queues
from tests.fake_hub import writable_fake_hub
from workers.export import HubTarget, pack
from workers.failures import ExportFailure
from workers.lifecycle import takes_training_jobs

TOKEN = "hf_fake_write_token_0123456789"


def model_folder(root: Path) -> Path:
    (root / "nested").mkdir(parents=True)
    (root / "config.json").write_text('{"model_type": "qwen2"}')
    (root / "model.safetensors").write_bytes(bytes(range(256)) * 4096)
    (root / "nested" / "extra.json").write_text("{}")
    return root


def test_the_archive_holds_every_file_under_its_name_and_reports_its_bytes(
    tmp_path: Path,
) -> None:
    folder = model_folder(tmp_path / "merged")
    shares: list[float] = []
    pack(folder, tmp_path / "out.tar.gz", "job_1-merged", shares.append)

    with tarfile.open(tmp_path / "out.tar.gz") as archive:
        names = sorted(member.name for member in archive.getmembers())
        weights = archive.extractfile("job_1-merged/model.safetensors")
        assert weights is not None and weights.read() == bytes(range(256)) * 4096
    assert names == [
        "job_1-merged/config.json",
        "job_1-merged/model.safetensors",
        "job_1-merged/nested/extra.json",
    ]
    assert shares == sorted(shares) and shares[-1] == 1.0 and len(shares) > 3
    assert not (tmp_path / "out.tar.gz.partial").exists()


def test_a_push_creates_the_repository_and_commits_the_folder(tmp_path: Path) -> None:
    folder = model_folder(tmp_path / "merged")
    with writable_fake_hub(token=TOKEN) as hub:
        target = HubTarget("me/model", token=TOKEN, private=True, endpoint=hub.endpoint)
        target.check_token()
        url = target.push(folder, "rft: merged of job_1")
        # Again: the repository exists (exist_ok), the commit goes on top.
        target.push(folder, "rft: merged of job_1, again")
    repo = hub.repos["me/model"]
    assert repo.private
    assert repo.files["model.safetensors"] == (folder / "model.safetensors").read_bytes()
    assert set(repo.files) == {"config.json", "model.safetensors", "nested/extra.json"}
    assert repo.commits == ["rft: merged of job_1", "rft: merged of job_1, again"]
    assert url.startswith(f"{hub.endpoint}/me/model/commit/")


@pytest.mark.parametrize("step", ["check_token", "push"])
def test_a_wrong_token_is_the_hubs_401_without_the_token(tmp_path: Path, step: str) -> None:
    folder = model_folder(tmp_path / "merged")
    wrong = "hf_wrong_token_abcdef"
    with writable_fake_hub(token=TOKEN) as hub:
        target = HubTarget("me/model", token=wrong, private=True, endpoint=hub.endpoint)
        with pytest.raises(ExportFailure) as failure:
            target.check_token() if step == "check_token" else target.push(folder, "x")
    assert "refused the token (HTTP 401 Unauthorized)" in str(failure.value)
    assert wrong not in str(failure.value)
    assert hub.repos == {}


def test_an_unreachable_hub_says_where(tmp_path: Path) -> None:
    endpoint = f"http://127.0.0.1:{free_port()}"
    target = HubTarget("me/model", token=TOKEN, private=True, endpoint=endpoint)
    with pytest.raises(ExportFailure, match=f"the hub at {endpoint} could not be used: .*refused"):
        target.check_token()


def consumer(queues: set[str] | None) -> SimpleNamespace:
    """What Celery's worker_ready hands over, as far as takes_training_jobs reads it."""
    consumed = SimpleNamespace(consume_from=dict.fromkeys(queues) if queues else None)
    return SimpleNamespace(app=SimpleNamespace(amqp=SimpleNamespace(queues=consumed)))


def test_every_worker_takes_exports_and_an_exports_only_one_nothing_else() -> None:
    assert EXPORTS_QUEUE in worker_queues(1)
    assert takes_training_jobs(consumer(None))  # no --queues: all of task_queues
    assert takes_training_jobs(consumer({"devices-1", "training", EXPORTS_QUEUE}))
    assert not takes_training_jobs(consumer({EXPORTS_QUEUE}))  # rft-server worker --exports-only
