"""Shared fixtures: one real stack per test session (Postgres, Redis, API, a Celery worker).

Tests are isolated by tenant: each test gets a tenant and key of its own, so nothing one test
stores is visible to another, exactly as between real customers.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from service.base_models.built_in.tiny_model import tiny_model_dir
from service.base_models.built_in.tiny_reward_model import tiny_reward_model_dir
from service.base_models.built_in.tiny_tool_model import tiny_tool_model_dir
from service.stack import LocalStack
from tests.fake_hub import FakeHub, writable_fake_hub
from tests.layers import MISSING_LAYER, skip_missing_layer
from tests.public_network import (
    HTTP_PORT,
    PublicHost,
    public_addresses,
    public_host,
    unavailable_reason,
)
from workers.compiled_caches import keyed_cache_dir

ROOT = Path(__file__).resolve().parents[1]
# The built-in models a stack builds on first use (~10 s each on 2 cores, ~15 s the tool model)
# and the code that builds them: a change to that code, or to a version below, builds anew.
BUILT_IN_MODELS = tuple(
    folder(Path()).name for folder in (tiny_model_dir, tiny_tool_model_dir, tiny_reward_model_dir)
)
MODEL_BUILDERS = ("model_building", "tiny_model", "tiny_tool_model", "tiny_reward_model")
MODEL_BUILD_PINS = ("torch", "transformers", "tokenizers", "trl", "peft", "safetensors")


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


def built_in_models_kept() -> Path:
    """Where built-in models built by earlier sessions wait, under the user's cache folder,
    keyed by the versions and the builders' code (workers/compiled_caches.py)."""
    builders = hashlib.sha256()
    for name in MODEL_BUILDERS:
        builders.update((ROOT / "service" / "base_models" / "built_in" / f"{name}.py").read_bytes())
    return keyed_cache_dir(
        "built-in-models", MODEL_BUILD_PINS, [f"builders {builders.hexdigest()}"]
    )


@contextlib.contextmanager
def built_in_models_reused(cache: Path) -> Iterator[Path]:
    """``cache`` (a session's own model cache) starts with the built-in models earlier sessions
    built, copied in; those this session built are kept for the next. Only the finished model
    folders travel, never what jobs leave beside them (archives, downloads)."""
    kept = built_in_models_kept()
    cache.mkdir(parents=True, exist_ok=True)
    for name in BUILT_IN_MODELS:
        if (kept / name / "config.json").is_file() and not (cache / name).exists():
            shutil.copytree(kept / name, cache / name)
    try:
        yield cache
    finally:
        for name in BUILT_IN_MODELS:
            if (cache / name / "config.json").is_file() and not (kept / name).exists():
                staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=kept))
                shutil.copytree(cache / name, staging, dirs_exist_ok=True)
                with contextlib.suppress(OSError):  # another session kept it first
                    os.rename(staging, kept / name)
                shutil.rmtree(staging, ignore_errors=True)


# The token the session's fake hub takes pushes with (a user's HF_TOKEN, as a job secret). A
# constant: this module is imported twice (as pytest's conftest and by the tests that name it),
# so a random one would differ between the two.
SESSION_HUB_TOKEN = "hf_rft_test_3f9c1d7a5e2b4c86a0d1e9f7b3c5a2d4"


@pytest.fixture(scope="session")
def session_hub() -> Iterator[FakeHub]:
    """The session stack's model hub: a fake one, the true outside edge (tests/fake_hub.py).
    Its workers push exports there; model ids it does not list are not on the hub."""
    with writable_fake_hub(token=SESSION_HUB_TOKEN) as hub:
        yield hub


@pytest.fixture(scope="session")
def stack(session_hub: FakeHub) -> Iterator[LocalStack]:
    """The session's stack: one worker, and the settings the integration tests need, so that
    they share it rather than each starting a stack of its own: the fake hub, the model
    cache as a model root (a built-in model's folder, e.g. the tiny reward model's, can be
    named as a path), and the public side's plain-http port allowed as a deployment allows an
    internal tool service (HTTP tools at http:// URLs there: tests/public_network.py)."""
    # Not under pytest's tmp dir: that is mode 700, and embedded Postgres runs as its own user.
    state_dir = Path(os.environ.get("RFT_TEST_STATE_DIR") or tempfile.mkdtemp(prefix="rft-test-"))
    models = built_in_models_reused(state_dir / "models")  # the stack's default model cache
    env = {
        "RFT_HUB_ENDPOINT": session_hub.endpoint,
        "RFT_MODEL_ROOTS": str(state_dir / "models"),
        "RFT_SANDBOX_EGRESS_ALLOW": f"{public_addresses().address}:{HTTP_PORT}",
    }
    # Servers given by the environment are used as they are; otherwise embedded ones start.
    with (
        models,
        LocalStack(
            state_dir,
            database_url=os.environ.get("RFT_TEST_DATABASE_URL"),
            redis_url=os.environ.get("RFT_TEST_REDIS_URL"),
            workers=1,
            extra_env=env,
        ) as running,
    ):
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
def public_side() -> Iterator[PublicHost]:
    """A "public" host in a network namespace of the tests' own (tests/public_network.py),
    for the egress tests; skipped (or failed, in CI) where one cannot be made."""
    reason = unavailable_reason()
    if reason is not None:
        skip_missing_layer(f"no public side for the egress tests: {reason}")
    with public_host() as host:
        yield host


@pytest.fixture(scope="session")
def shared_model_cache() -> Iterator[Path]:
    """The built-in models, built once for the stacks of their own (each would build them
    again, ~15 s for rft-tiny-tools): builds are locked and land with one rename. Models an
    earlier session built are copied in (built_in_models_reused)."""
    cache = Path(tempfile.mkdtemp(prefix="rft-test-models-"))
    with built_in_models_reused(cache):
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
