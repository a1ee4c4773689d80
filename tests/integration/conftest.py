"""Fixtures for modules that train one job and share it across their tests."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from service.stack import LocalStack
from tests.conftest import new_tenant_key, tenant_client


@pytest.fixture(scope="module")
def tenant_key(stack: LocalStack) -> str:
    """One tenant per module, so the module's shared job is its tenant's only job."""
    return new_tenant_key(stack)


@pytest.fixture(scope="module")
def tenant(stack: LocalStack, tenant_key: str) -> Iterator[httpx.Client]:
    """``tenant_key``'s client of the native API; generous timeout: the calls wait on training
    and on generation."""
    with tenant_client(stack, tenant_key) as http:
        http.timeout = httpx.Timeout(300)
        yield http
