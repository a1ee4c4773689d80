"""Tests that need a layer of the machine (the sandbox's bubblewrap, cgroups and seccomp
filter; Chromium for the dashboard's browser tests) skip where it is missing, saying why.

With RFT_REQUIRE_ALL_LAYERS=1 (scripts/test.sh sets it when CI=true) a missing layer fails
those tests instead: CI's machines have every layer (scripts/setup.sh installs bubblewrap and
Chromium), so a skip there would hide a broken setup and let the suite pass without them.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

REQUIRE_ALL_LAYERS = os.environ.get("RFT_REQUIRE_ALL_LAYERS") == "1"
# The mark tests/conftest.py turns into a failure at setup.
MISSING_LAYER = "missing_layer"


def _failure(reason: str) -> str:
    return f"{reason} (RFT_REQUIRE_ALL_LAYERS=1: a missing layer is a failure, not a skip)"


def needs_layer(present: object, reason: str) -> pytest.MarkDecorator:
    """A mark for tests that need a layer: none when ``present`` is true; else a skip saying
    ``reason``, or with RFT_REQUIRE_ALL_LAYERS=1 a failure saying it."""
    if present:
        return pytest.mark.skipif(False, reason=reason)  # a no-op that pytest.param accepts
    if REQUIRE_ALL_LAYERS:
        return getattr(pytest.mark, MISSING_LAYER)(_failure(reason))
    return pytest.mark.skip(reason=reason)


def skip_missing_layer(reason: str) -> NoReturn:
    """Inside a test: skip for a missing layer, or with RFT_REQUIRE_ALL_LAYERS=1 fail."""
    if REQUIRE_ALL_LAYERS:
        pytest.fail(_failure(reason), pytrace=False)
    pytest.skip(reason)
