"""Shared fixtures: one real stack per test session (Postgres, Redis, API, a Celery worker).

Tests are isolated by tenant: each test gets a tenant and key of its own, so nothing one test
stores is visible to another, exactly as between real customers.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from service.stack import LocalStack
from tests.layers import MISSING_LAYER


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MISSING_LAYER}(reason): something this test needs is missing where it is required "
        "(RFT_REQUIRE_ALL_LAYERS, RFT_REQUIRE_GPU, RFT_REQUIRE_VLLM: tests/layers.py): the "
        "test fails at setup",
    )


def pytest_runtest_setup(item: pytest.Item) -> None:
    missing = item.get_closest_marker(MISSING_LAYER)
    if missing is not None:
        pytest.fail(str(missing.args[0]), pytrace=False)


@pytest.fixture(scope="session")
def stack() -> Iterator[LocalStack]:
    # Not under pytest's tmp dir: that is mode 700, and embedded Postgres runs as its own user.
    state_dir = Path(os.environ.get("RFT_TEST_STATE_DIR") or tempfile.mkdtemp(prefix="rft-test-"))
    # Servers given by the environment are used as they are; otherwise embedded ones start.
    with LocalStack(
        state_dir,
        database_url=os.environ.get("RFT_TEST_DATABASE_URL"),
        redis_url=os.environ.get("RFT_TEST_REDIS_URL"),
        workers=1,
    ) as running:
        os.environ["RFT_DATABASE_URL"] = running.database_url or ""
        os.environ["RFT_REDIS_URL"] = running.redis_url or ""
        os.environ["RFT_STATE_DIR"] = str(state_dir)
        from service.db import get_engine, get_sessionmaker
        from service.settings import get_settings

        get_settings.cache_clear()
        get_engine.cache_clear()
        get_sessionmaker.cache_clear()
        yield running
        get_engine().dispose()
    if "RFT_TEST_STATE_DIR" not in os.environ:
        shutil.rmtree(state_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def shared_model_cache() -> Iterator[Path]:
    """The built-in models, built once for the stacks of their own (each would build them
    again, ~15 s for rft-tiny-tools): builds are locked and land with one rename."""
    cache = Path(tempfile.mkdtemp(prefix="rft-test-models-"))
    yield cache
    shutil.rmtree(cache, ignore_errors=True)


@contextlib.contextmanager
def stack_of_its_own(
    prefix: str, *, env: dict[str, str], workers: int = 1, model_cache: Path | None = None
) -> Iterator[LocalStack]:
    """A stack for one test module, with settings the session's stack does not have (``env``
    for its servers); its state is removed afterwards. ``model_cache``: where its workers find
    (or build) the built-in models, unless ``env`` says."""
    state_dir = Path(tempfile.mkdtemp(prefix=prefix))
    if model_cache is not None:
        env = {"RFT_MODEL_CACHE_DIR": str(model_cache), **env}
    try:
        with LocalStack(state_dir, workers=workers, extra_env=env) as stack:
            yield stack
    finally:
        shutil.rmtree(state_dir, ignore_errors=True)


def new_tenant_key(stack: LocalStack) -> str:
    """A new tenant with one API key, created in ``stack``'s database."""
    from sqlalchemy import create_engine
    from sqlalchemy.orm import Session

    from service.auth.service import KEY_PREFIX, ensure_api_key
    from service.db import to_sqlalchemy_url

    key = KEY_PREFIX + uuid.uuid4().hex
    engine = create_engine(to_sqlalchemy_url(stack.database_url or ""))
    try:
        with Session(engine) as session, session.begin():
            ensure_api_key(session, f"tenant-{uuid.uuid4().hex[:12]}", key)
    finally:
        engine.dispose()
    return key


@contextlib.contextmanager
def tenant_client(stack: LocalStack, key: str | None = None) -> Iterator[httpx.Client]:
    """An HTTP client of ``stack``'s API, signed in as a tenant (a new one unless ``key``)."""
    key = key or new_tenant_key(stack)
    with httpx.Client(
        base_url=stack.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=60
    ) as http:
        yield http


@pytest.fixture
def api_key(stack: LocalStack) -> str:
    return new_tenant_key(stack)


@pytest.fixture
def client(stack: LocalStack, api_key: str) -> Iterator[httpx.Client]:
    with tenant_client(stack, api_key) as http:
        yield http


@pytest.fixture
def other_client(stack: LocalStack) -> Iterator[httpx.Client]:
    """A second tenant, to prove that tenants cannot see each other."""
    with tenant_client(stack) as http:
        yield http
