"""A job on the vLLM engine its predecessor kept vs the same job on a fresh engine.

Each round starts one process per variant (alternating which goes first), which trains job A
(2 steps) and then job B (3 steps), both colocated with vLLM in that process, as the worker's
spare does. ``kept``: the process may keep engines (workers.training.kept_engine), so B adopts
A's; ``fresh``: B builds its own, as every job did before. Timed: B from the call to its first
recorded step, and to its end. Needs vLLM (``.venv-vllm`` here: vLLM's CPU build).

Run: .venv-vllm/bin/python bench/bench_engine_reuse.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from variants import child_result, interleaved  # type: ignore[import-not-found]

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "sdk" / "src")]


def child(variant: str) -> dict[str, float]:
    import importlib
    import os

    from tests.training.harness import RecordingObserver
    from tests.vllm_generation.conftest import VLLM_CACHE_ROOT
    from workers.training.kept_engine import EngineKeeper
    from workers.training.step_records import StepRecord

    class TimedObserver(RecordingObserver):
        first_step_at: float | None = None

        def on_step(self, record: StepRecord) -> None:
            if self.first_step_at is None:
                self.first_step_at = time.perf_counter()
            super().on_step(record)

    # The vLLM tests' own job: the tiny model at their fixed path, the demo rewards. By name:
    # mypy checks bench/ but not the test modules.
    train = importlib.import_module("tests.vllm_generation.test_vllm_training").train
    # The compile cache the vLLM tests fill: both variants start compiled, as a worker's jobs do.
    os.environ.setdefault("VLLM_CACHE_ROOT", str(VLLM_CACHE_ROOT))
    keeper = EngineKeeper(may_keep=variant == "kept")
    with tempfile.TemporaryDirectory() as folder:
        train(Path(folder) / "a", 2, engines=keeper)
        observer = TimedObserver()
        started = time.perf_counter()
        train(Path(folder) / "b", 3, observer=observer, seed=7, engines=keeper)
        ended = time.perf_counter()
    assert observer.first_step_at is not None
    keeper.release_kept()
    assert keeper.adoptions() == (1 if variant == "kept" else 0)
    return {"first_step_s": observer.first_step_at - started, "job_s": ended - started}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", choices=["kept", "fresh"])
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child)))
        return
    results: dict[str, list[dict[str, float]]] = {"kept": [], "fresh": []}
    for round_index, variant in interleaved(list(results), args.rounds):
        results[variant].append(
            child_result([__file__, "--child", variant], what=variant, cwd=ROOT)
        )
        print(f"round {round_index + 1} {variant:5}: {results[variant][-1]}", flush=True)
    print("\njob B (3 steps, tiny model, vLLM CPU build), median of", args.rounds, "rounds:")
    print(f"{'':8}{'to first step (s)':>20}{'whole job (s)':>16}")
    medians = {}
    for variant, runs in results.items():
        first = statistics.median(r["first_step_s"] for r in runs)
        whole = statistics.median(r["job_s"] for r in runs)
        medians[variant] = (first, whole)
        print(f"{variant:8}{first:>20.2f}{whole:>16.2f}")
    saved_first = medians["fresh"][0] - medians["kept"][0]
    print(
        f"the kept engine saves {saved_first:.2f} s before the first step "
        f"({medians['fresh'][0] / medians['kept'][0]:.1f}x faster to it)"
    )


if __name__ == "__main__":
    main()
