"""A job's guards from the SDK and the CLI job file: only what the caller set is sent."""

from __future__ import annotations

from pathlib import Path

import yaml

from rft import Guards
from rft.cli.files import read_job_spec
from tests.sdk.job_inputs import create_request_body

REWARD = {"f": {"source": "def f(p, c, e):\n    return 1.0\n"}}


def test_guards_reach_the_request_only_when_given() -> None:
    body = create_request_body(guards=Guards(pause_on=["length_drift"], patience=2))
    # The server's defaults stay the server's: unset thresholds are not sent.
    assert body["guards"] == {"pause_on": ["length_drift"], "patience": 2}
    assert create_request_body(guards={"repetition_share": 0.4})["guards"] == {
        "repetition_share": 0.4
    }
    assert "guards" not in create_request_body()


def test_job_file_names_guards(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    guards = {"pause_on": ["repetition"], "repetition_share": 0.4}
    path.write_text(
        yaml.safe_dump({"dataset_id": "ds_x", "reward_functions": REWARD, "guards": guards})
    )
    assert read_job_spec(path)["guards"] == guards
    path.write_text(yaml.safe_dump({"dataset_id": "ds_x", "reward_functions": REWARD}))
    assert "guards" not in read_job_spec(path)
