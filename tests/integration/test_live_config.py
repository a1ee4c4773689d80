"""Live reward updates on the real stack: stored versions, applied at a step boundary."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from typer.testing import CliRunner

from rft.cli.app import app
from service.stack import LocalStack
from tests.integration.helpers import all_pages, create_job, upload_jsonl, wait_for, wait_until
from tests.tiny import TINY_HYPERPARAMETERS

pytestmark = pytest.mark.integration


def constant(name: str, value: float) -> str:
    return f"def {name}(prompt, completion, example):\n    return {value}\n"


def long_job(client: httpx.Client, **hyperparameters: Any) -> dict[str, Any]:
    dataset_id = upload_jsonl(client, [{"prompt": f"Say {w}:"} for w in "abcdefgh"])
    return create_job(
        client,
        {
            "dataset_id": dataset_id,
            "reward_functions": {"score": {"source": constant("score", 1.0), "weight": 1.0}},
            "hyperparameters": {
                **TINY_HYPERPARAMETERS,
                "train_steps": 400,
                "num_generations": 4,
                **hyperparameters,
            },
        },
    )


def put_config(
    client: httpx.Client, job_id: str, functions: dict[str, Any], **extra: Any
) -> httpx.Response:
    # If-Match is required; "*" replaces whatever version is current.
    headers = extra.pop("headers", {"If-Match": "*"})
    return client.put(
        f"/v1/jobs/{job_id}/config",
        json={"reward_functions": functions, **extra},
        headers=headers,
    )


def test_mid_run_update_applies_at_one_step_boundary(client: httpx.Client) -> None:
    job = long_job(client)
    job_id = job["id"]
    config = client.get(f"/v1/jobs/{job_id}/config")
    assert config.headers["ETag"] == '"1"'
    assert config.json()["reward_functions"]["score"]["label"] == "score_v1"
    wait_until(client, job_id, lambda j: j["steps_completed"] >= 2)

    # A stale If-Match is refused and changes nothing.
    stale = put_config(
        client, job_id, {"score": {"source": constant("score", 5.0)}}, headers={"If-Match": '"7"'}
    )
    assert stale.status_code == 412, stale.text
    # Broken code is refused, naming the function; the run goes on with v1.
    broken = put_config(
        client,
        job_id,
        {"score": {"source": "def score(prompt, completion, example):\n  return (\n"}},
    )
    assert broken.status_code == 400 and "'score'" in broken.json()["detail"]
    assert client.get(f"/v1/jobs/{job_id}/config").json()["version"] == 1

    # The update: score's source changes (score_v2), a function is added.
    updated = put_config(
        client,
        job_id,
        {
            "score": {"source": constant("score", 2.0), "weight": 1.0},
            "bonus": {"source": constant("bonus", 1.0), "weight": 0.5},
        },
        headers={"If-Match": '"1"'},
    )
    assert updated.status_code == 200, updated.text
    body = updated.json()
    assert body["version"] == 2 and updated.headers["ETag"] == '"2"'
    assert body["changed_functions"] == ["score"] and body["added_functions"] == ["bonus"]
    assert body["config"]["reward_functions"]["score"]["version"] == 2

    applied = wait_until(client, job_id, lambda j: j["applied_config_version"] == 2)
    wait_until(client, job_id, lambda j: j["steps_completed"] >= applied["steps_completed"] + 2)

    # Ten rapid updates: each stored with its own version, none lost, the last one applied.
    for value in range(3, 13):
        response = put_config(client, job_id, {"score": {"source": constant("score", value)}})
        assert response.status_code == 200, response.text
    versions = client.get(f"/v1/jobs/{job_id}/config/versions").json()
    assert [v["version"] for v in versions] == list(range(1, 13))
    assert versions[-1]["reward_functions"]["score"]["source"] == constant("score", 12)
    final_applied = wait_until(client, job_id, lambda j: j["applied_config_version"] == 12)
    wait_until(
        client, job_id, lambda j: j["steps_completed"] >= final_applied["steps_completed"] + 2
    )
    assert client.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
    wait_for(client, job_id)

    steps = client.get(f"/v1/jobs/{job_id}/steps").json()["data"]
    completions = all_pages(client, f"/v1/jobs/{job_id}/completions")
    events = all_pages(client, f"/v1/jobs/{job_id}/events/history")
    versions = client.get(f"/v1/jobs/{job_id}/config/versions").json()
    switch_step = versions[1]["applied_at_step"]
    assert switch_step is not None and switch_step > 2

    expected_total = {1: 1.0, 2: 2.5, **{v: float(v) for v in range(3, 13)}}
    for step in steps:
        version = step["config_version"]
        assert (version == 1) == (step["step"] < switch_step), step
        assert step["reward_mean"] == pytest.approx(expected_total[version])
        assert step["reward_functions"]["score"]["version"] == version
        rows = [c for c in completions if c["step"] == step["step"]]
        # No step is scored by a mix of versions.
        assert {c["config_version"] for c in rows} == {version}
        assert all(c["total"] == pytest.approx(expected_total[version]) for c in rows)
        # bonus was added by v2 and dropped by v3 (later updates list only score).
        assert ("bonus" in step["reward_functions"]) == (version == 2)

    applied_events = [e for e in events if e["kind"] == "config_applied"]
    assert applied_events[0]["message"] == f"config v2 applied at step {switch_step}"
    assert applied_events[-1]["data"]["config_version"] == 12
    # Updates that were superseded before a step boundary are stored but never applied.
    applied_versions = {e["data"]["config_version"] for e in applied_events}
    assert all(
        (v["applied_at_step"] is not None) == (v["version"] in applied_versions | {1})
        for v in versions
    )

    # Once the job has ended its config is frozen.
    late = put_config(client, job_id, {"score": {"source": constant("score", 0.0)}})
    assert late.status_code == 409


def test_dry_run_rescores_the_last_step_and_changes_nothing(client: httpx.Client) -> None:
    dataset_id = upload_jsonl(client, [{"prompt": f"Say {w}:"} for w in "abcd"])
    source = "def length(prompt, completion, example):\n    return float(len(completion))\n"
    job = create_job(
        client,
        {
            "dataset_id": dataset_id,
            "reward_functions": {"length": {"source": source}},
            "hyperparameters": {**TINY_HYPERPARAMETERS, "train_steps": 2, "num_generations": 4},
        },
    )
    job = wait_for(client, job["id"])
    flipped = "def length(prompt, completion, example):\n    return -float(len(completion))\n"
    response = client.put(
        f"/v1/jobs/{job['id']}/config",
        params={"dry_run": "true"},
        json={"reward_functions": {"length": {"source": flipped}}},
    )
    assert response.status_code == 200, response.text
    result = response.json()
    assert result["dry_run"] is True and result["step"] == 2
    assert len(result["completions"]) == 2 * 4
    for row in result["completions"]:
        assert row["new_scores"]["length"] == -row["old_scores"]["length"]
        assert row["new_advantage_sign"] == -row["old_advantage_sign"]
    nonzero = sum(1 for r in result["completions"] if r["old_advantage_sign"] != 0)
    assert result["advantage_sign_changes"] == nonzero
    assert client.get(f"/v1/jobs/{job['id']}/config").json()["version"] == 1


def test_applies_from_step_is_the_first_step_recorded_with_the_version(
    stack: LocalStack, client: httpx.Client, api_key: str, tmp_path: Path
) -> None:
    """Through the API and the CLI: the step an update names is where the worker applies it,
    while the job trains (updates land at any moment of a step)."""
    job_id = long_job(client)["id"]
    cli = CliRunner(env={"RFT_API_KEY": api_key, "RFT_BASE_URL": stack.base_url})
    promised: dict[int, int] = {}
    try:
        for version in range(2, 8):
            wait_until(
                client,
                job_id,
                lambda job, v=version: (
                    job["applied_config_version"] == v - 1 and job["steps_completed"] >= 2
                ),
            )
            functions = {"score": {"source": constant("score", float(version)), "weight": 1.0}}
            if version % 2:
                config_file = tmp_path / f"v{version}.yaml"
                config_file.write_text(yaml.safe_dump({"reward_functions": functions}))
                # --force: If-Match '*', the CLI's way to replace whatever version is current.
                result = cli.invoke(
                    app, ["config", "update", job_id, "-f", str(config_file), "--force"]
                )
                assert result.exit_code == 0, (result.output, result.exception)
                said = re.search(r"config version (\d+) applies from step (\d+)", result.output)
                assert said is not None and int(said[1]) == version, result.output
                promised[version] = int(said[2])
            else:
                response = put_config(client, job_id, functions)
                assert response.status_code == 200, response.text
                promised[version] = response.json()["applies_from_step"]
        wait_until(client, job_id, lambda job: job["applied_config_version"] == 7)
    finally:
        client.post(f"/v1/jobs/{job_id}/cancel")
    wait_for(client, job_id)

    steps = all_pages(client, f"/v1/jobs/{job_id}/steps")
    first_recorded = {
        version: min(s["step"] for s in steps if s["config_version"] == version)
        for version in promised
    }
    assert first_recorded == promised
    versions = client.get(f"/v1/jobs/{job_id}/config/versions").json()
    assert {v["version"]: v["applied_at_step"] for v in versions[1:]} == promised


ROTATED_SECRET = (
    "import os\n"
    "def judge(prompt, completion, example):\n"
    "    rotated = os.environ['JUDGE_KEY'].startswith('sk-new')\n"
    "    return float(rotated) + float('OLD_ONLY' not in os.environ)\n"
)


def test_a_config_update_rotates_the_secrets_its_functions_see(client: httpx.Client) -> None:
    dataset_id = upload_jsonl(client, [{"prompt": f"Say {w}:"} for w in "abcd"])
    job = create_job(
        client,
        {
            "dataset_id": dataset_id,
            "reward_functions": {"judge": {"source": ROTATED_SECRET}},
            "hyperparameters": {**TINY_HYPERPARAMETERS, "train_steps": 400},
            "secrets": {"JUDGE_KEY": "sk-old-1f2e3d4c", "OLD_ONLY": "sk-retired-9a8b7c"},
        },
    )
    job_id = job["id"]
    try:
        wait_until(client, job_id, lambda j: j["steps_completed"] >= 2)
        # The same functions; only the secrets change: one replaced, one removed.
        response = put_config(
            client,
            job_id,
            {"judge": {"source": ROTATED_SECRET}},
            secrets={"JUDGE_KEY": "sk-new-5e6f7a8b", "OLD_ONLY": None},
        )
        assert response.status_code == 200, response.text
        update = response.json()
        assert update["secrets_changed"] and update["config"]["secret_names"] == ["JUDGE_KEY"]
        applies_from = update["applies_from_step"]
        wait_until(client, job_id, lambda j: j["steps_completed"] >= applies_from + 1)
    finally:
        client.post(f"/v1/jobs/{job_id}/cancel")
    wait_for(client, job_id)

    steps = all_pages(client, f"/v1/jobs/{job_id}/steps")
    # Before: the old key, and OLD_ONLY set (0.0); from the update's step on: 2.0.
    assert {s["step"]: s["reward_mean"] for s in steps} == {
        s["step"]: (2.0 if s["step"] >= applies_from else 0.0) for s in steps
    }
    shown = json.dumps(
        [
            client.get(f"/v1/jobs/{job_id}/config/versions").json(),
            client.get(f"/v1/jobs/{job_id}").json(),
        ]
    )
    assert "sk-new-5e6f7a8b" not in shown and "sk-old-1f2e3d4c" not in shown
