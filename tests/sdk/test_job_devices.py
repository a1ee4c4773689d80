"""A job's devices and engine travel from the job file and ``jobs.create`` into the request;
left out, the request leaves them to the server (1 device, 'ddp')."""

from __future__ import annotations

from pathlib import Path

import yaml

from rft.cli.files import read_job_spec
from rft.models import Job
from tests.sdk.job_inputs import create_request_body

REWARD = {"f": {"source": "def f(p, c, e):\n    return 1.0\n"}}


def test_devices_and_engine_reach_the_request_only_when_given() -> None:
    body = create_request_body(num_devices=4, engine="fsdp")
    assert (body["num_devices"], body["engine"]) == (4, "fsdp")
    left_out = create_request_body()
    assert "num_devices" not in left_out and "engine" not in left_out


def test_job_file_names_devices_and_engine(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(
        yaml.safe_dump(
            {"dataset_id": "ds_x", "reward_functions": REWARD, "num_devices": 2, "engine": "ddp"}
        )
    )
    spec = read_job_spec(path)
    assert (spec["num_devices"], spec["engine"]) == (2, "ddp")
    path.write_text(yaml.safe_dump({"dataset_id": "ds_x", "reward_functions": REWARD}))
    assert "num_devices" not in read_job_spec(path)


def test_a_job_from_an_older_server_reads_as_one_device() -> None:
    job = Job.model_validate(
        {
            "id": "job_x",
            "name": None,
            "status": "queued",
            "failure_reason": None,
            "base_model": "rft-tiny",
            "dataset_id": "ds_x",
            "hyperparameters": {},
            "config_version": 1,
            "applied_config_version": None,
            "steps_completed": 0,
            "allow_network": False,
            "created_at": "2026-01-01T00:00:00Z",
            "started_at": None,
            "finished_at": None,
        }
    )
    assert (job.num_devices, job.engine) == (1, "ddp")
