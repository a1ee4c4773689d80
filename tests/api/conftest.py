"""Fixtures of the API tests beyond the session's stack (tests/conftest.py)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from service.stack import LocalStack
from tests.conftest import tenant_client


@pytest.fixture(scope="module")
def idle_api() -> Iterator[tuple[LocalStack, httpx.Client]]:
    """A stack without workers, and a tenant's client of it: its jobs are only created and
    edited, never trained, so they stay `queued` and take config updates whatever the
    training code would do with them (no race with a job that finishes first)."""
    state_dir = Path(tempfile.mkdtemp(prefix="rft-idle-api-"))
    try:
        with (
            LocalStack(state_dir, workers=0, extra_env={"RFT_HUB_CHECK": "off"}) as stack,
            tenant_client(stack) as client,
        ):
            yield stack, client
    finally:
        shutil.rmtree(state_dir, ignore_errors=True)
