"""RFT_SANDBOX_CGROUPS and RFT_SANDBOX_PIDS_MAX reach the sandbox; bad values are refused."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from service.settings import Settings, sandbox_settings


def test_cgroup_settings_reach_the_sandbox(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RFT_SANDBOX_CGROUPS", "require")
    monkeypatch.setenv("RFT_SANDBOX_PIDS_MAX", "20")
    monkeypatch.setenv("RFT_REWARD_MEMORY_LIMIT_MB", "300")
    sandbox = sandbox_settings(Settings(), allow_network=False, secrets={})
    assert (sandbox.cgroups, sandbox.cgroup_pids_max, sandbox.memory_limit_mb) == (
        "require",
        20,
        300,
    )


def test_defaults_use_cgroups_where_the_host_has_them() -> None:
    sandbox = sandbox_settings(Settings(), allow_network=False, secrets={})
    assert (sandbox.cgroups, sandbox.cgroup_pids_max) == ("auto", 64)


@pytest.mark.parametrize(
    ("variable", "value"), [("RFT_SANDBOX_CGROUPS", "sometimes"), ("RFT_SANDBOX_PIDS_MAX", "2")]
)
def test_bad_values_are_refused(monkeypatch: pytest.MonkeyPatch, variable: str, value: str) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValidationError, match=variable.removeprefix("RFT_").lower()):
        Settings()
