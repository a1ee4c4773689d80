"""Times the phases of every GRPO step in a benchmarked service's rank process.

bench_overhead.py puts this folder on the LocalStack's PYTHONPATH together with
RFT_BENCH_PHASES_DIR; Python imports ``sitecustomize`` at start in every process of the stack.
Only where the variable is set, and only once ``trl.trainer.grpo_trainer`` is imported (the rank
process: the API, Celery and the sandbox never import it), ``GRPOTrainer.train`` is patched by
bench/phases.py to write each run's phases to that folder. Nothing else changes.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

TARGET = "trl.trainer.grpo_trainer"


class _PatchAfterImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != TARGET:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        loader = spec.loader
        exec_module = loader.exec_module

        def exec_and_patch(module: ModuleType) -> None:
            exec_module(module)
            sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
            import phases  # bench/phases.py

            folder = Path(os.environ[phases.PHASES_DIR_ENV])
            phases.patch_grpo_train(phases.write_phases(folder), module.GRPOTrainer)

        loader.exec_module = exec_and_patch  # type: ignore[method-assign]
        return spec


if os.environ.get("RFT_BENCH_PHASES_DIR"):
    sys.meta_path.insert(0, _PatchAfterImport())
