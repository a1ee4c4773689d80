"""The same job on 1 and on 2 devices, through the API: with reproducible_sampling, the same
completions and the same metrics at every step.

A step's global batch is the same either way (prompts_per_step x num_generations); on 2 ranks
each generates half of it. Sampling keyed per completion (seed, step, global index) makes the
halves the 1-device job's rows; from identical completions follow identical rewards and
advantages, and a loss equal up to float rounding (DDP sums the ranks' gradients in another
order than one process sums its micro-batch).
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from service.stack import LocalStack
from tests.integration import test_multi_rank
from tests.integration.helpers import all_pages, create_job, upload_jsonl, wait_for
from tests.integration.multi_rank_jobs import NUM_GENERATIONS, PROMPTS_PER_STEP, RANKS, job_request

pytestmark = pytest.mark.integration

# The 2-device stack of test_multi_rank (module-scoped: this module starts its own) and its client.
ranks_stack = test_multi_rank.ranks_stack
ranks_key = test_multi_rank.ranks_key
ranks_client = test_multi_rank.ranks_client

TRAIN_STEPS = 3
# Prompts of different lengths: in one process they share a left-padded batch, on 2 ranks each
# rank pads only its own half, so a row's tokens must not depend on its neighbours' padding.
PROMPTS = ["Say a:", "Write the letter b many times:", "c?", "Say d, then d again and again:"]
# The loss may differ by float rounding only: the ranks sum the same per-token terms in
# another order. Measured: |difference| <= 2e-8, on losses from ~1e-8 (steps where the terms
# cancel) to ~5e-2. abs 1e-6 leaves room for the rounding of terms of ~1e-2; rel 1e-4 still
# catches a misnormalised loss (off by the world size) wherever the loss is not ~0.
LOSS_TOLERANCE = {"rel": 1e-4, "abs": 1e-6}


def run(client: httpx.Client, dataset_id: str, num_devices: int) -> str:
    request = job_request(
        client, train_steps=TRAIN_STEPS, checkpoint_every=TRAIN_STEPS, num_devices=num_devices
    )
    request["dataset_id"] = dataset_id
    # Backward passes of 2 completions: 4 per step on one device, 2 per rank on two, so the
    # gradient accumulation differs too.
    request["hyperparameters"].update(seed=11, reproducible_sampling=True, micro_batch_size=2)
    job = wait_for(client, str(create_job(client, request)["id"]), timeout_s=900)
    assert job["status"] == "succeeded", job.get("failure_reason")
    assert job["num_devices"] == num_devices
    assert job["hyperparameters"]["reproducible_sampling"] is True
    return str(job["id"])


def completions_by_step(client: httpx.Client, job_id: str) -> dict[int, list[tuple[Any, ...]]]:
    rows = all_pages(client, f"/v1/jobs/{job_id}/completions")
    by_step: dict[int, list[tuple[Any, ...]]] = {}
    for row in rows:
        by_step.setdefault(row["step"], []).append(
            (
                row["prompt_index"],
                row["group_position"],
                row["prompt"],
                row["completion"],
                row["token_count"],
                row["total"],
                row["advantage"],
            )
        )
    return {step: sorted(samples) for step, samples in by_step.items()}


def test_one_and_two_devices_sample_and_train_the_same(
    ranks_stack: LocalStack, ranks_client: httpx.Client
) -> None:
    dataset_id = upload_jsonl(ranks_client, [{"prompt": prompt} for prompt in PROMPTS])
    one, two = (run(ranks_client, dataset_id, devices) for devices in (1, RANKS))

    samples_one = completions_by_step(ranks_client, one)
    samples_two = completions_by_step(ranks_client, two)
    assert sorted(samples_one) == list(range(1, TRAIN_STEPS + 1))
    assert all(
        len(samples) == PROMPTS_PER_STEP * NUM_GENERATIONS for samples in samples_one.values()
    )
    for step in samples_one:
        assert samples_two[step] == samples_one[step], f"step {step}: completions differ"
    # Not one completion repeated for the whole group: each sample has noise of its own.
    assert len({sample[3] for sample in samples_one[1]}) > 1

    steps_one = ranks_client.get(f"/v1/jobs/{one}/steps").json()["data"]
    steps_two = ranks_client.get(f"/v1/jobs/{two}/steps").json()["data"]
    assert [s["step"] for s in steps_two] == [s["step"] for s in steps_one]
    for alone, split in zip(steps_one, steps_two, strict=True):
        # The same completions scored by the same code: the same rewards, exactly.
        assert (split["reward_mean"], split["reward_std"], split["frac_reward_zero_std"]) == (
            alone["reward_mean"],
            alone["reward_std"],
            alone["frac_reward_zero_std"],
        )
        assert split["loss"] == pytest.approx(alone["loss"], **LOSS_TOLERANCE)
