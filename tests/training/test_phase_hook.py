"""bench_overhead's view into the service's rank process: with bench/phase_hook on PYTHONPATH
and RFT_BENCH_PHASES_DIR set, a process running the worker's training code (run_grpo, its
RecordingGRPOTrainer) writes each step's phases, timed by the same wrappers as the bare side.
This proves the TRL 1.16 methods bench/phases.py wraps exist and are the ones a step calls."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import phases  # noqa: E402  (bench/phases.py)

SCRIPT = textwrap.dedent(
    """
    import sys
    from pathlib import Path

    from service.demo import demo_dataset
    from service.jobs.hyperparameters import Hyperparameters
    from tests.tiny import TINY_HYPERPARAMETERS
    from tests.training.harness import RecordingObserver, letter_config, reward_sandbox
    from workers.training.grpo import TrainingSpec, run_grpo

    work = Path(sys.argv[1])
    sandbox = reward_sandbox()
    try:
        run_grpo(
            TrainingSpec(
                base_model="rft-tiny",
                dataset=demo_dataset(),
                reward_config=letter_config(),
                hyperparameters=Hyperparameters(**{**TINY_HYPERPARAMETERS, "train_steps": 4}),
                output_dir=work / "run",
                model_cache_dir=Path(sys.argv[2]),
            ),
            sandbox,
            RecordingObserver(),
        )
    finally:
        sandbox.close()
    """
)


def test_the_hook_times_the_workers_trainer_by_phase(tmp_path: Path, model_cache_dir: Path) -> None:
    folder = tmp_path / "phases"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "bench" / "phase_hook"), str(ROOT)]),
        phases.PHASES_DIR_ENV: str(folder),
        "OMP_NUM_THREADS": "1",
    }
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path), str(model_cache_dir)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    (written,) = folder.iterdir()
    found = json.loads(written.read_text())
    assert found["dtypes"] == {"parameters": "float32", "autocast": "none"}
    steps = found["steps"]
    assert len(steps) == 3  # 4 steps: timed from the end of the first
    for step in steps:
        assert list(step) == list(phases.PHASES)
        for phase in (
            phases.GENERATION,
            phases.REWARDS,
            phases.FORWARD_BACKWARD,
            phases.OPTIMIZER,
            phases.RECORDING,
        ):
            assert step[phase] > 0, phase
        assert step[phases.WEIGHT_SYNC] == 0  # transformers generation: nothing to sync
        # Each phase counts its own time within the step's wall time: nothing is counted twice.
        assert step[phases.OTHER] >= 0
