"""Which sandboxes a rank starts for its job: a supervised job runs no reward code, so it
starts none (a sandbox start is processes, bubblewrap and a Python start: wasted per job)."""

from __future__ import annotations

import dataclasses
import gc
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from workers.training import rank_process
from workers.training.rank_process import JOB_FILE, RankJob
from workers.training.spec import TrainingOutcome, TrainingSpec


def run_rank_of(
    method: str, make_spec: Callable[..., TrainingSpec], tmp_path: Path, monkeypatch: Any
) -> list[str]:
    """run_rank on a job of ``method`` with the training itself stood in: which sandboxes it
    opened."""
    opened: list[str] = []

    def open_sandbox(job: RankJob, started: Any = None) -> Any:
        opened.append("reward")
        return type("Sandbox", (), {"close": lambda self: None})()

    def trained(*args: Any, **kwargs: Any) -> TrainingOutcome:
        return TrainingOutcome(steps_completed=1, stop_reason=None, adapter_path=tmp_path)

    monkeypatch.setattr(rank_process, "_open_sandbox", open_sandbox)
    monkeypatch.setattr("workers.training.sft.run_sft", trained)
    monkeypatch.setattr("workers.training.grpo.run_grpo", trained)
    monkeypatch.setenv("RANK", "1")  # not rank 0: no worker to talk to
    spec = dataclasses.replace(make_spec(), method=method)
    job = RankJob(spec=spec, allow_network=False, packages_path=None, report_to=[])
    (tmp_path / JOB_FILE).write_bytes(pickle.dumps(job))
    try:
        assert rank_process.run_rank(tmp_path) == 0
    finally:
        gc.unfreeze()  # run_rank freezes the heap, as a rank process does: not this one's
    return opened


@pytest.mark.parametrize(("method", "sandboxes"), [("sft", []), ("grpo", ["reward"])])
def test_only_a_job_that_scores_rewards_starts_a_reward_sandbox(
    method: str,
    sandboxes: list[str],
    make_spec: Callable[..., TrainingSpec],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert run_rank_of(method, make_spec, tmp_path, monkeypatch) == sandboxes
