"""The warm spare training process (workers.training.rank_process --spare): what it prepares
before a job comes must change nothing a job sees, and it leaves nothing running."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from sandbox.api import RewardFunctionSpec, ScoringBatch
from tests.processes import alive, descendants
from workers.job_sandbox import JobSandbox
from workers.training.rank_process import (
    SPARE_READY,
    RankJob,
    _open_sandbox,
    _start_sandbox_ahead,
)
from workers.training.spec import TrainingSpec

REPO_ROOT = Path(__file__).resolve().parents[2]
SECRET_LENGTH = RewardFunctionSpec(
    "secret_length",
    "import os\n\ndef secret_length(prompt, completion, example):\n"
    "    return float(len(os.environ.get('RFT_TEST_SECRET', '')))\n",
)


def rank_job(spec: TrainingSpec, secrets: dict[str, str] | None = None) -> RankJob:
    # The job's secrets travel with its reward config.
    config = dataclasses.replace(spec.reward_config, secrets=secrets or {})
    return RankJob(
        spec=dataclasses.replace(spec, reward_config=config),
        allow_network=False,
        packages_path=None,
        report_to=[],
    )


def score_one(sandbox: JobSandbox) -> float | None:
    batch = ScoringBatch(prompts=["p"], completions=["c"], examples=[{"prompt": "p"}])
    result = sandbox.score(batch)[SECRET_LENGTH.name]
    assert not result.errors, result.errors
    return result.scores[0]


def test_a_common_job_takes_the_sandbox_started_ahead(
    make_spec: Callable[..., TrainingSpec],
) -> None:
    ahead = _start_sandbox_ahead()
    assert ahead is not None
    sandbox = _open_sandbox(rank_job(make_spec()), ahead)
    try:
        sandbox.load([SECRET_LENGTH])
        # The job's functions went into the processes started ahead: they are the job's.
        assert [spec.name for spec in ahead.functions] == [SECRET_LENGTH.name]
        assert score_one(sandbox) == 0.0
    finally:
        sandbox.close()


def test_a_job_with_secrets_starts_its_own_sandbox_and_the_one_ahead_is_closed(
    make_spec: Callable[..., TrainingSpec],
) -> None:
    ahead = _start_sandbox_ahead()
    assert ahead is not None
    sandbox = _open_sandbox(rank_job(make_spec(), secrets={"RFT_TEST_SECRET": "12345"}), ahead)
    try:
        sandbox.load([SECRET_LENGTH])
        # The job's code sees its secret: it runs in processes started with it.
        assert score_one(sandbox) == 5.0
        with pytest.raises(RuntimeError, match="closed"):
            ahead.load([SECRET_LENGTH])
    finally:
        sandbox.close()


def test_the_spare_warms_up_without_touching_the_random_state_and_leaves_nothing_behind(
    tmp_path: Path,
) -> None:
    # The warm-up runs torch ops; a job trains from the random state a fresh process has.
    probe = (
        "import sys, gc, torch\n"
        "from workers.training import rank_process as rp\n"
        "rp._warm_imports()\n"
        "state = torch.random.get_rng_state().clone()\n"
        "rp._warm_first_job()\n"
        "assert torch.equal(torch.random.get_rng_state(), state), 'random state changed'\n"
        "assert gc.get_freeze_count() > 0\n"
        "print('ok')\n"
    )
    checked = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert checked.stdout.strip().endswith("ok"), checked.stderr[-3000:]

    log = tmp_path / "spare.log"
    with open(log, "wb") as stderr:
        spare = subprocess.Popen(
            [sys.executable, "-m", "workers.training.rank_process", "--spare"],
            cwd=REPO_ROOT,
            stdin=subprocess.PIPE,
            stderr=stderr,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 600
        while SPARE_READY not in log.read_text(errors="replace"):
            assert spare.poll() is None, log.read_text(errors="replace")[-3000:]
            assert time.monotonic() < deadline, "the spare never became ready"
            time.sleep(0.2)
        started_ahead = descendants(spare.pid)
        assert started_ahead, "no sandbox process was started ahead of a job"
        # The worker closes its end without a job (it stops): the spare and its sandbox go.
        assert spare.stdin is not None
        spare.stdin.close()
        assert spare.wait(timeout=60) == 0
        deadline = time.monotonic() + 30
        while any(alive(pid) for pid in started_ahead):
            assert time.monotonic() < deadline, "the spare's sandbox outlived it"
            time.sleep(0.1)
    finally:
        if spare.poll() is None:
            os.killpg(spare.pid, 9)
            spare.wait()
