"""A colocated vLLM engine kept from one job to the next (workers.training.kept_engine).

In one process: a job on the engine its predecessor kept samples exactly what it samples on a
fresh engine (same completions, same rewards), with a seed other than vLLM's own so that the
restored random state matters (the control shows the difference without it). Through the
worker (the second job on the same model builds no engine, one built otherwise gets its own):
tests/vllm_generation/test_vllm_jobs.py, after a cancelled job.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.layers import needs_gpu
from tests.vllm_generation.test_vllm_training import train
from workers.training import kept_engine
from workers.training.kept_engine import EngineKeeper

pytestmark = pytest.mark.vllm

# Not vLLM's own seed (0, which a fresh engine's start seeds the process with): with the job's
# seed, only the restored random state makes an adopted engine sample as a fresh one.
JOB_SEED = 7


@pytest.fixture
def keeping() -> Iterator[EngineKeeper]:
    """Engines kept from job to job as the worker's spare keeps them; none is left kept after."""
    keeper = EngineKeeper(may_keep=True)
    yield keeper
    keeper.release_kept()


def sampled(
    output_dir: Path, keeper: EngineKeeper, **hyperparameters: Any
) -> list[tuple[float, list[str]]]:
    """Each step's mean reward and completions."""
    observer = train(
        output_dir, 3, seed=JOB_SEED, learning_rate=0.01, engines=keeper, **hyperparameters
    )
    return [
        (round(record.reward_mean, 6), [c.completion for c in record.completions])
        for record in observer.records
    ]


def test_a_job_on_a_kept_engine_samples_what_it_would_on_a_fresh_one(
    tmp_path: Path, keeping: EngineKeeper, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Moves the weights vLLM holds.
    train(tmp_path / "first", 2, engines=keeping, learning_rate=0.05)
    assert keeping.kept_model() is not None
    on_kept = sampled(tmp_path / "kept", keeping)
    assert keeping.adoptions() == 1

    keeping.release_kept()
    on_fresh = sampled(tmp_path / "fresh", keeping)
    assert keeping.adoptions() == 1, "the fresh run adopted an engine"
    assert on_kept == on_fresh

    # Control: adopted (the engine the fresh run kept) without the random state a fresh start
    # leaves, the same job samples other completions.
    assert keeping.kept_model() is not None
    monkeypatch.setattr(kept_engine._RandomState, "restore", lambda self: None)
    assert sampled(tmp_path / "unrestored", keeping) != on_fresh
    assert keeping.adoptions() == 2


@needs_gpu(None if torch.cuda.is_available() else "vLLM's sleep mode needs CUDA")
def test_an_engine_kept_asleep_is_adopted_asleep_and_samples_as_a_fresh_one(
    tmp_path: Path, keeping: EngineKeeper
) -> None:
    """Sleep mode: kept at level 2 (weights and KV cache released), as TRL leaves a fresh
    engine; the adopting job's first sync wakes it. Not yet run: no vLLM on a lent GPU."""
    train(tmp_path / "first", 2, engines=keeping, learning_rate=0.05, vllm_sleep_mode=True)
    assert keeping.kept_model() is not None
    on_kept = sampled(tmp_path / "kept", keeping, vllm_sleep_mode=True)
    assert keeping.adoptions() == 1
    keeping.release_kept()
    on_fresh = sampled(tmp_path / "fresh", keeping, vllm_sleep_mode=True)
    # Every step, as on CPU (the test above): each step's completions and the reward they got.
    assert len(on_kept) == 3 and on_kept == on_fresh
