"""The SDK's config updates: If-Match, which the server requires, and secret rotation."""

from __future__ import annotations

import pytest

import rft
from tests.sdk.job_inputs import SHOUT_SOURCE
from tests.tiny import TINY_HYPERPARAMETERS


def test_a_config_without_a_version_is_refused_and_check_version_false_replaces(
    rft_client: rft.Client, dataset: rft.Dataset
) -> None:
    job = rft_client.jobs.create(
        dataset=dataset,
        reward_functions={"shout": SHOUT_SOURCE},
        hyperparameters={**TINY_HYPERPARAMETERS, "train_steps": 1000},
    )
    try:
        by_hand = {"reward_functions": {"shout": {"source": SHOUT_SOURCE, "weight": 2.0}}}
        with pytest.raises(rft.PreconditionRequiredError, match="If-Match is required"):
            rft_client.jobs.update_config(job.id, by_hand)
        assert rft_client.jobs.update_config(job.id, by_hand, check_version=False).version == 2

        config = rft_client.jobs.get_config(job.id)  # carries its ETag
        config.reward_functions["shout"].weight = 0.5
        update = rft_client.jobs.update_config(job.id, config)
        assert update.version == 3 and update.config.reward_functions["shout"].weight == 0.5
    finally:
        rft_client.jobs.cancel(job.id)


def test_update_config_rotates_secrets_by_name(
    rft_client: rft.Client, dataset: rft.Dataset
) -> None:
    job = rft_client.jobs.create(
        dataset=dataset,
        reward_functions={"shout": SHOUT_SOURCE},
        hyperparameters={**TINY_HYPERPARAMETERS, "train_steps": 1000},
        secrets={"JUDGE_KEY": "sk-first-0a1b2c", "OLD_KEY": "sk-old-3d4e5f"},
    )
    try:
        config = rft_client.jobs.get_config(job.id)
        update = rft_client.jobs.update_config(
            job.id, config, secrets={"JUDGE_KEY": "sk-second-6a7b8c", "OLD_KEY": None}
        )
        assert update.secrets_changed and update.config.secret_names == ["JUDGE_KEY"]
        unchanged = rft_client.jobs.update_config(job.id, rft_client.jobs.get_config(job.id))
        assert not unchanged.secrets_changed and unchanged.config.secret_names == ["JUDGE_KEY"]
    finally:
        rft_client.jobs.cancel(job.id)
