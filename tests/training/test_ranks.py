"""How a step's slices from several ranks become one record, and how a step splits over ranks."""

from __future__ import annotations

import pytest

from sandbox.api import FunctionResult, RewardError, RewardErrorKind
from service.jobs.hyperparameters import Hyperparameters
from tests.tiny import TINY_HYPERPARAMETERS
from workers.training.grpo import per_rank_batches
from workers.training.ranks import RankGroup, RankSetupError, merge_generations
from workers.training.reward_dispatch import ScoredGeneration


def slice_of(rank: int, size: int, result: FunctionResult) -> ScoredGeneration:
    return ScoredGeneration(
        step=3,
        config_version=2,
        weights={"f": 1.0},
        versions={"f": 1},
        prompts=[f"p{rank}"] * size,
        completions=[f"r{rank}c{i}" for i in range(size)],
        token_counts=[rank * 10 + i for i in range(size)],
        dataset_indices=[rank] * size,
        results={"f": result},
        totals=[float(rank)] * size,
    )


def test_slices_join_in_rank_order_with_errors_and_logs_of_each_rank() -> None:
    rank0 = FunctionResult(
        name="f",
        version=1,
        scores=[1.0, None, 1.0],
        errors=[RewardError(kind=RewardErrorKind.EXCEPTION, message="bad sample", sample_index=1)],
        logs="zero\n",
        duration_s=0.5,
    )
    rank1 = FunctionResult(
        name="f",
        version=1,
        scores=[None, None, None],
        errors=[RewardError(kind=RewardErrorKind.TIMEOUT, message="whole call", traceback="tb")],
        logs="one",
        logs_truncated=True,
        duration_s=0.7,
    )
    generation, advantages = merge_generations(
        [(slice_of(0, 3, rank0), [0.1, 0.2, 0.3]), (slice_of(1, 3, rank1), [])]
    )
    assert generation.completions == ["r0c0", "r0c1", "r0c2", "r1c0", "r1c1", "r1c2"]
    assert generation.token_counts == [0, 1, 2, 10, 11, 12]
    assert generation.totals == [0.0, 0.0, 0.0, 1.0, 1.0, 1.0]
    # A rank whose advantages are missing gets None for its samples only.
    assert advantages == [0.1, 0.2, 0.3, None, None, None]
    merged = generation.results["f"]
    assert merged.scores == [1.0, None, 1.0, None, None, None]
    # rank 1's whole-call error concerns its three samples, not rank 0's.
    assert [e.sample_index for e in merged.errors] == [1, 3, 4, 5]
    assert merged.failed_samples == 4
    assert [e.traceback for e in merged.errors[1:]] == ["tb", None, None]
    assert merged.logs == "[rank 0]\nzero\n[rank 1]\none\n"
    assert merged.logs_truncated and merged.duration_s == 0.7


def test_slices_scored_with_different_configs_are_refused() -> None:
    result = FunctionResult(name="f", version=1, scores=[1.0])
    other = slice_of(1, 1, result)
    other.config_version = 3
    with pytest.raises(RankSetupError):
        merge_generations([(slice_of(0, 1, result), [0.0]), (other, [0.0])])


def test_one_process_is_a_world_of_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    group = RankGroup.current()
    assert (group.rank, group.world_size, group.is_main) == (0, 1, True)
    assert group.from_main(lambda: "decided") == "decided"
    assert group.gather(5) == [5]


def test_ranks_that_would_train_alone_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    # torchrun says 2 processes, but torch.distributed was never set up here.
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(RankSetupError, match="each would train alone"):
        RankGroup.current()


def test_a_step_splits_over_ranks_with_the_same_global_batch() -> None:
    hp = Hyperparameters(
        **{
            **TINY_HYPERPARAMETERS,
            "prompts_per_step": 2,
            "num_generations": 8,
            "micro_batch_size": 4,
        }
    )
    assert per_rank_batches(hp, 1) == (4, 4)
    assert per_rank_batches(hp, 2) == (4, 2)
    assert per_rank_batches(hp, 4) == (4, 1)
    # A micro-batch larger than a rank's share shrinks to a divisor of it.
    assert per_rank_batches(hp, 8) == (2, 1)
    with pytest.raises(ValueError, match="split evenly over 3 processes"):
        per_rank_batches(hp, 3)
