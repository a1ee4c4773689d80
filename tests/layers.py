"""The one place a test may skip (tests/unit/test_skips_go_through_layers.py holds every other
file to that), so that each skip says which kind of thing is missing and a run that must have
it fails instead of passing without it.

Kinds, and the variable that turns their skip into a failure:

- a layer of the machine (``needs_layer``): the sandbox's bubblewrap, cgroups and seccomp
  filter, root, Linux tools (setpriv, taskset), Chromium for the dashboard's browser tests, the
  main environment's extras (DeepSpeed, the OpenAI client). RFT_REQUIRE_ALL_LAYERS=1, which
  scripts/test.sh sets when CI=true: CI's machines have every layer (scripts/setup.sh installs
  them), so a skip there would hide a broken setup.
- CUDA GPUs (``needs_gpu``): RFT_REQUIRE_GPUS=N, which scripts/gpu_check.sh sets to the number
  of GPUs the driver lists: a test needing at most N GPUs that cannot run (torch sees no CUDA,
  bitsandbytes is missing) fails; one needing more than the machine has still skips. CI has no
  GPU, so RFT_REQUIRE_ALL_LAYERS leaves these skips alone.
- vLLM able to generate (``needs_vllm``): RFT_REQUIRE_VLLM=1, which scripts/test_vllm.sh and
  scripts/gpu_check.sh set in the environments built for vLLM. The main .venv has no vLLM by
  design, so there these tests skip.
- a host too busy to measure what a test measures (``skip_busy_host``): always a skip, never a
  failure; pytest -rs lists them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import NoReturn

import pytest

# The mark tests/conftest.py turns into a failure at setup.
MISSING_LAYER = "missing_layer"


@dataclass(frozen=True)
class Requirement:
    kind: str  # what is missing, in the skip's reason
    require_env: str  # set there (not "0"): missing is a failure

    @property
    def required(self) -> bool:
        return bool(self.require_env) and os.environ.get(self.require_env, "0") not in ("", "0")

    def reason(self, why: str) -> str:
        return f"{self.kind}: {why}"

    def failure(self, why: str) -> str:
        setting = f"{self.require_env}={os.environ.get(self.require_env)}"
        return f"{self.reason(why)} ({setting}: missing is a failure, not a skip)"

    def mark(self, present: object, why: str) -> pytest.MarkDecorator:
        """None when ``present`` is true (a no-op mark that pytest.param accepts); else a
        skip saying ``why``, or where this kind is required a failure saying it."""
        if present:
            return pytest.mark.skipif(False, reason=why)
        if self.required:
            return getattr(pytest.mark, MISSING_LAYER)(self.failure(why))
        return pytest.mark.skip(reason=self.reason(why))

    def skip(self, why: str) -> NoReturn:
        """Inside a test: skip saying ``why``, or where this kind is required fail."""
        if self.required:
            pytest.fail(self.failure(why), pytrace=False)
        pytest.skip(self.reason(why))


LAYER = Requirement("missing layer", "RFT_REQUIRE_ALL_LAYERS")
VLLM = Requirement("vLLM test", "RFT_REQUIRE_VLLM")


def needs_layer(present: object, reason: str) -> pytest.MarkDecorator:
    """A mark for tests that need a layer CI has: none when ``present`` is true; else a skip,
    or with RFT_REQUIRE_ALL_LAYERS=1 a failure, saying ``reason``."""
    return LAYER.mark(present, reason)


def skip_missing_layer(reason: str) -> NoReturn:
    """Inside a test: skip for a missing layer, or with RFT_REQUIRE_ALL_LAYERS=1 fail."""
    LAYER.skip(reason)


def gpus_required() -> int:
    """How many GPUs this run must use (RFT_REQUIRE_GPUS; 0: none required)."""
    value = os.environ.get("RFT_REQUIRE_GPUS", "")
    return int(value) if value.isdigit() else 0


def _gpu(gpus: int) -> Requirement:
    # Required only where the machine has the GPUs: a 2-GPU test on a 1-GPU machine skips.
    return Requirement("GPU test", "RFT_REQUIRE_GPUS" if gpus <= gpus_required() else "")


def needs_gpu(problem: str | None, gpus: int = 1) -> pytest.MarkDecorator:
    """A mark for tests that need ``gpus`` CUDA GPUs: ``problem`` says why they cannot run here
    (None: they can). A skip, or a failure where RFT_REQUIRE_GPUS (scripts/gpu_check.sh) says
    the machine has that many GPUs."""
    return _gpu(gpus).mark(problem is None, problem or "")


def skip_without_gpu(reason: str, gpus: int = 1) -> NoReturn:
    """Inside a GPU test: what it needs besides the GPU is missing (e.g. bitsandbytes)."""
    _gpu(gpus).skip(reason)


def needs_vllm(problem: str | None) -> pytest.MarkDecorator:
    """A mark for tests that need vLLM to generate: a skip, or with RFT_REQUIRE_VLLM=1
    (scripts/test_vllm.sh, scripts/gpu_check.sh) a failure."""
    return VLLM.mark(problem is None, problem or "")


def skip_busy_host(reason: str) -> NoReturn:
    """The host is too loaded for what the test measures: a skip whatever the environment
    requires (it is no missing part), listed by pytest -rs."""
    pytest.skip(f"busy host: {reason}")


def needs_module(name: str, layer: str) -> pytest.MarkDecorator:
    """A mark for tests that need an importable module the main environment installs
    (``layer``: which extra or package provides it)."""
    import importlib.util

    return LAYER.mark(importlib.util.find_spec(name) is not None, f"{name} is missing ({layer})")
