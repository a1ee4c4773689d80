"""Reward models through the SDK on the real stack: rft.RewardModel trains a job, comes back
as a RewardModelConfig, previews a new weight, and travels through the CLI's YAML."""

from __future__ import annotations

from pathlib import Path

import pytest

import rft
from rft.cli.files import config_to_yaml, read_config
from rft.cli.summaries import config_changes
from tests.sdk.job_inputs import QUICK_HYPERPARAMETERS, SHOUT_SOURCE


def test_a_reward_model_trains_a_job(rft_client: rft.Client, dataset: rft.Dataset) -> None:
    job = rft_client.jobs.create(
        dataset=dataset,
        reward_functions={
            "judge": rft.RewardModel("rft-tiny-reward", weight=0.5, batch_size=4),
            "shout": SHOUT_SOURCE,
        },
        hyperparameters=rft.Hyperparameters(**QUICK_HYPERPARAMETERS),
    )
    finished = rft_client.jobs.wait(job.id, timeout=300, poll_interval=0.5)
    assert finished.status == "succeeded", finished

    steps = rft_client.jobs.steps(job.id)
    assert [step.step for step in steps] == [1, 2]
    for step in steps:
        judge = step.reward_functions["judge"]
        assert (judge.version, judge.weight, judge.errors) == (1, 0.5, 0)
        assert judge.mean is not None and judge.mean > 0

    config = rft_client.jobs.get_config(job.id)
    judge_config = config.reward_functions["judge"]
    assert isinstance(judge_config, rft.RewardModelConfig)
    assert (judge_config.model, judge_config.batch_size, judge_config.label) == (
        "rft-tiny-reward",
        4,
        "judge_v1",
    )
    # A new weight, previewed on the last step: the recorded scores, weighted anew.
    judge_config.weight = 1.5
    preview = rft_client.jobs.update_config(job.id, config, dry_run=True)
    assert preview.step == 2 and preview.not_scored == []
    for row in preview.completions:
        assert row.new_scores["judge"] == row.old_scores["judge"]
    # A model that is none is refused, naming the entry (this server takes no local paths).
    config.reward_functions["judge"] = rft.RewardModel("/nowhere/reward-model", weight=1.5)
    assert isinstance(config.reward_functions["judge"], rft.RewardModelConfig)
    with pytest.raises(rft.BadRequestError, match="'judge': model '/nowhere/reward-model'"):
        rft_client.jobs.update_config(job.id, config, dry_run=True)

    tested = rft_client.reward_functions.test(
        reward_functions={"judge": rft.RewardModel("rft-tiny-reward")},
        samples=[{"prompt": "Say a", "completion": "banana"}],
    )
    assert tested.not_scored == ["judge"] and tested.results["judge"].scores == [None]


def test_reward_models_travel_through_the_cli_yaml(tmp_path: Path) -> None:
    config = rft.JobConfig(
        reward_functions={
            "judge": rft.RewardModel("org/reward-model", weight=2.0, max_length=512),
            "shout": SHOUT_SOURCE,
        }
    )
    path = tmp_path / "config.yaml"
    path.write_text(config_to_yaml(config))
    assert "model: org/reward-model" in path.read_text()
    again = read_config(path)
    assert again.to_update_request()["reward_functions"] == {
        "judge": {"model": "org/reward-model", "weight": 2.0, "max_length": 512},
        "shout": {"source": SHOUT_SOURCE, "weight": 1.0},
    }
    swapped = rft.JobConfig(reward_functions={**again.reward_functions})
    swapped.reward_functions["judge"] = rft.RewardModel("org/other", weight=2.0)
    assert config_changes(again, swapped) == ["judge: model org/other"]
