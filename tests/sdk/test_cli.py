"""The ``rft`` command line, run in-process with Typer's CliRunner against the real server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

import rft
from rft.cli.app import app
from rft.cli.files import read_job_spec
from rft.cli.sparkline import sparkline
from rft.errors import RFTError
from service.stack import LocalStack
from tests.held_jobs import held_job, let_go
from tests.sdk.conftest import FinishedJob
from tests.sdk.job_inputs import QUICK_HYPERPARAMETERS

REWARD_FILE = """
def vowels(prompt, completion, example):
    print("vowels saw", len(completion))
    return sum(ch in "aeiou" for ch in completion) / max(1, len(completion))
"""


def invoke(cli: CliRunner, *args: str, expect_exit: int = 0) -> str:
    result = cli.invoke(app, list(args))
    assert result.exit_code == expect_exit, (result.output, result.exception)
    return result.output


def write_job_files(directory: Path, **hyperparameters: int) -> Path:
    (directory / "rows.jsonl").write_text(
        "\n".join(json.dumps({"prompt": f"Write about {t}:"}) for t in "abcdef")
    )
    (directory / "rewards.py").write_text(REWARD_FILE)
    spec = {
        "name": "from yaml",
        "dataset": "rows.jsonl",
        "base_model": "rft-tiny",
        "reward_functions": {
            "vowels": {"source_file": "rewards.py", "weight": 1.0},
            "short": {
                "source": "def short(prompt, completion, example):\n    return 1.0\n",
                "weight": 0.5,
            },
        },
        "hyperparameters": {**QUICK_HYPERPARAMETERS, **hyperparameters},
    }
    path = directory / "job.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def only_job(client: rft.Client) -> rft.Job:
    jobs = list(client.jobs.list())
    assert len(jobs) == 1
    return jobs[0]


def test_sparkline_scales_between_min_and_max() -> None:
    assert sparkline([0.0, 0.5, 1.0]) == "▁▅█"
    assert sparkline([2.0, None, 2.0]) == "▅ ▅"
    assert sparkline([]) == ""


def test_datasets_upload_and_list(cli: CliRunner, tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text('{"prompt": "a"}\n{"prompt": "b"}\n')
    uploaded = invoke(cli, "datasets", "upload", str(path), "--name", "cli rows")
    assert "2 rows" in uploaded
    listed = invoke(cli, "datasets", "list")
    assert "cli rows" in listed and uploaded.split()[1].rstrip(":") in listed


def test_train_watch_and_inspect(cli: CliRunner, tmp_path: Path, rft_client: rft.Client) -> None:
    created = invoke(cli, "jobs", "create", "-f", str(write_job_files(tmp_path)))
    job = only_job(rft_client)
    assert job.id in created and job.name == "from yaml"

    watched = invoke(cli, "jobs", "watch", job.id, "--interval", "0.3")
    assert "succeeded" in watched and "step 2/2" in watched
    assert "total" in watched and "vowels" in watched and "short" in watched
    assert any(bar in watched for bar in "▁▂▃▄▅▆▇█")

    assert job.id in invoke(cli, "jobs", "list")
    assert json.loads(invoke(cli, "jobs", "get", job.id))["status"] == "succeeded"

    shown = invoke(cli, "completions", "show", job.id, "--step", "2", "--count", "2")
    assert "best of step 2" in shown and "worst of step 2" in shown

    logs = invoke(cli, "logs", job.id, "--step", "1", "--function", "vowels")
    assert "step 1 · vowels v1" in logs and "vowels saw" in logs

    # The job has ended: a config update is a conflict, reported as one line, exit 1.
    config_file = tmp_path / "config.yaml"
    invoke(cli, "config", "get", job.id, "-o", str(config_file))
    result = cli.invoke(app, ["config", "update", job.id, "-f", str(config_file)])
    assert result.exit_code == 1 and "409" in result.output


def test_a_supervised_job_file_trains_and_watches_its_loss(
    cli: CliRunner, tmp_path: Path, rft_client: rft.Client
) -> None:
    (tmp_path / "chats.jsonl").write_text(
        "\n".join(
            json.dumps(
                {
                    "messages": [
                        {"role": "user", "content": f"Say {w}"},
                        {"role": "assistant", "content": w * 3},
                    ]
                }
            )
            for w in "abcd"
        )
    )
    spec = {
        "dataset": "chats.jsonl",
        "method": "sft",  # no reward functions needed
        "hyperparameters": {"preset": "tiny-cpu", "train_steps": 3, "batch_size": 4},
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(spec))
    invoke(cli, "jobs", "create", "-f", str(path))
    job = only_job(rft_client)
    assert job.method == "sft"
    watched = invoke(cli, "jobs", "watch", job.id, "--interval", "0.3")
    assert "succeeded" in watched and "step 3/3" in watched
    assert "loss" in watched and "token accuracy" in watched and "total" not in watched


def test_config_round_trip_on_a_running_job(
    cli: CliRunner, tmp_path: Path, rft_client: rft.Client
) -> None:
    invoke(cli, "jobs", "create", "-f", str(write_job_files(tmp_path, train_steps=400)))
    job = only_job(rft_client)
    try:
        rft_client.jobs.wait(job.id, until_step=1, timeout=300, poll_interval=0.3)
        printed = invoke(cli, "config", "get", job.id)
        assert "def vowels" in printed and "version: 1" in printed

        config_file = tmp_path / "config.yaml"
        invoke(cli, "config", "get", job.id, "-o", str(config_file))
        config = yaml.safe_load(config_file.read_text())
        config["reward_functions"]["short"]["weight"] = 2.0
        config_file.write_text(yaml.safe_dump(config))

        summary = invoke(cli, "config", "update", job.id, "-f", str(config_file), "--dry-run")
        assert "nothing was changed" in summary and "short: weight 0.5 → 2" in summary
        assert "vowels:" in summary and "advantage sign flips:" in summary
        assert len(summary.splitlines()) < 15, summary
        assert '"dry_run": true' in invoke(
            cli, "config", "update", job.id, "-f", str(config_file), "--dry-run", "--json"
        )
        assert "config version 2" in invoke(cli, "config", "update", job.id, "-f", str(config_file))
        assert rft_client.jobs.get_config(job.id).reward_functions["short"].weight == 2.0

        # The file still says version 1: refused unless forced.
        stale = cli.invoke(app, ["config", "update", job.id, "-f", str(config_file)])
        assert stale.exit_code == 1 and "412" in stale.output
        invoke(cli, "config", "update", job.id, "-f", str(config_file), "--force")
    finally:
        assert "cancelled" in invoke(cli, "jobs", "cancel", job.id)


def test_errors_are_one_line_with_the_server_detail(cli: CliRunner) -> None:
    result = cli.invoke(app, ["jobs", "get", "job_nope"])
    assert result.exit_code == 1
    assert "404 NotFound" in result.output and "job_nope" in result.output
    assert "Traceback" not in result.output


def test_global_options_override_the_environment(stack: LocalStack, api_key: str) -> None:
    runner = CliRunner(env={"RFT_API_KEY": "rft_wrong", "COLUMNS": "200"})
    denied = runner.invoke(app, ["--base-url", stack.base_url, "jobs", "list"])
    assert denied.exit_code == 1 and "401" in denied.output
    allowed = runner.invoke(
        app, ["--api-key", api_key, "--base-url", stack.base_url, "jobs", "list"]
    )
    assert allowed.exit_code == 0, allowed.output


def test_bad_job_file_is_explained(cli: CliRunner, tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({"reward_functions": {"f": {"source": "x"}}}))
    result = cli.invoke(app, ["jobs", "create", "-f", str(path)])
    assert result.exit_code == 1 and "dataset_id or dataset" in result.output


def test_job_file_secrets_come_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "job.yaml"
    spec = {
        "dataset_id": "ds_x",
        "reward_functions": {"f": {"source": "def f(p, c, e):\n    return 1.0\n"}},
        "secrets_from_env": ["JUDGE_KEY"],
    }
    path.write_text(yaml.safe_dump(spec))
    monkeypatch.delenv("JUDGE_KEY", raising=False)
    with pytest.raises(RFTError, match=r"unset environment variables \['JUDGE_KEY'\]"):
        read_job_spec(path)
    monkeypatch.setenv("JUDGE_KEY", "sk-from-env")
    assert read_job_spec(path)["secrets"] == {"JUDGE_KEY": "sk-from-env"}


def test_checkpoints_adapters_and_chat_prompts(
    stack: LocalStack, finished_job: FinishedJob, tmp_path: Path
) -> None:
    """On the session's finished job with checkpoints (tests/sdk/conftest.py); pausing and
    resuming: the test above and tests/recording/test_job_lease.py."""
    job = finished_job.job
    cli = CliRunner(
        env={"RFT_API_KEY": finished_job.api_key, "RFT_BASE_URL": stack.base_url, "COLUMNS": "200"}
    )
    # Ids are printed whole even in a narrow terminal: they are what the next command takes.
    narrow = CliRunner(
        env={"RFT_API_KEY": finished_job.api_key, "RFT_BASE_URL": stack.base_url, "COLUMNS": "60"}
    )
    assert job.id in invoke(narrow, "jobs", "list")

    listed = invoke(cli, "checkpoints", "list", job.id)
    assert "│ 1 " in listed and "final adapter: ready" in listed
    saved = invoke(cli, "checkpoints", "download", job.id, "1", "-o", str(tmp_path))
    folder = tmp_path / f"{job.id}-step-1"
    assert f"saved {folder}" in saved and (folder / "adapter_config.json").is_file()
    saved = invoke(cli, "jobs", "download-adapter", job.id, "-o", str(tmp_path), "--archive")
    assert (tmp_path / f"{job.id}-adapter.tar.gz").is_file() and "adapter.tar.gz" in saved

    # Chat prompts read as lines of text, not as a Python list.
    shown = invoke(cli, "completions", "show", job.id, "--step", "1", "--count", "1")
    assert "system: Be brief." in shown and "user: Say " in shown
    assert "'role'" not in shown and "{" not in shown


def test_missing_checkpoint_is_one_line(cli: CliRunner, tmp_path: Path) -> None:
    result = cli.invoke(app, ["checkpoints", "download", "job_nope", "3", "-o", str(tmp_path)])
    assert result.exit_code == 1 and "404" in result.output and "Traceback" not in result.output


def test_pause_and_resume_say_what_the_worker_does(cli: CliRunner, api_key: str) -> None:
    """Pausing, then a resume before the worker let go: the pause is called off; once it has
    let go (paused), a resume queues the job again."""
    job_id = held_job(api_key)
    assert f"{job_id} pausing (the worker saves a checkpoint" in invoke(
        cli, "jobs", "pause", job_id
    )
    invoke(cli, "jobs", "pause", job_id, expect_exit=1)  # already pausing: 409
    called_off = invoke(cli, "jobs", "resume", job_id)
    assert f"{job_id} running (the pause is called off: training goes on)" in called_off
    invoke(cli, "jobs", "pause", job_id)
    let_go(job_id)
    assert json.loads(invoke(cli, "jobs", "get", job_id))["status"] == "paused"
    assert invoke(cli, "jobs", "resume", job_id).strip() == f"{job_id} queued"
    assert f"{job_id} cancelled" in invoke(cli, "jobs", "cancel", job_id)
