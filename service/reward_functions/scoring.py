"""Running user reward code from the API (tests, pre-flight checks, dry runs) and the workers,
always through the sandbox, with one mapping from our settings to its limits."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sandbox.api import FunctionResult, RewardFunctionSpec, ScoringBatch
from sandbox.reward_host import ProcessSandbox
from sandbox.runtime_packages import PackageInstallError, install_runtime_packages
from service.errors import BadRequest
from service.server_paths import hide_server_paths
from service.settings import Settings, get_settings, sandbox_settings

# How long the API waits for pip (a job's own install on a worker may take 900 s). Endpoints
# that install are plain functions, so the wait holds one of the server's worker threads, never
# its event loop; the same list is installed once and reused.
API_INSTALL_TIMEOUT_S = 300.0


class RuntimePackagesFailed(BadRequest):
    """The request's runtime_packages could not be installed; the detail quotes pip."""


def api_runtime_packages(packages: Sequence[str], settings: Settings | None = None) -> Path:
    """A folder holding ``packages``, installed as a worker installs a job's, under the API's
    state folder (one per list of requirements, kept for the next request)."""
    settings = settings or get_settings()
    wanted = "\n".join(sorted(packages))
    key = hashlib.sha256(wanted.encode()).hexdigest()[:24]
    target = settings.state_dir.resolve() / "runtime-packages" / key
    try:
        return install_runtime_packages(list(packages), target, timeout_s=API_INSTALL_TIMEOUT_S)
    except PackageInstallError as error:
        raise RuntimePackagesFailed(hide_server_paths(str(error), settings)) from None


def score_once(
    functions: Sequence[RewardFunctionSpec],
    prompts: list[Any],
    completions: list[str],
    examples: list[dict[str, Any]],
    *,
    allow_network: bool = False,
    secrets: dict[str, str] | None = None,
    runtime_packages: Sequence[str] = (),
    settings: Settings | None = None,
    trajectories: list[list[dict[str, Any]]] | None = None,
    egress_hosts: Sequence[str] = (),
) -> dict[str, FunctionResult]:
    """Load ``functions`` into a fresh sandbox, score one batch, stop the sandbox.

    ``trajectories``: an agent job's rollouts, passed as training passes them (ScoringBatch).

    ``runtime_packages`` are installed first (api_runtime_packages), as for a job. Raises
    RewardCodeError when a function cannot load, RuntimePackagesFailed (400) when a package
    cannot be installed.
    """
    settings = settings or get_settings()
    config = sandbox_settings(
        settings, allow_network=allow_network, secrets=secrets or {}, egress_hosts=egress_hosts
    )
    if runtime_packages:
        config.extra_python_paths = [api_runtime_packages(runtime_packages, settings)]
    with ProcessSandbox(config) as sandbox:
        sandbox.load(functions)
        return sandbox.score(
            ScoringBatch(
                prompts=prompts,
                completions=completions,
                examples=examples,
                trajectories=trajectories,
            )
        )
