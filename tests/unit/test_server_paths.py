"""Server folders in text bound for clients are named by their role."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from service.server_paths import hide_paths_in, hide_server_paths
from service.settings import Settings
from workers.failures import describe_failure


def test_a_failure_quoting_server_folders_names_them_by_role(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path / "state")
    model = settings.resolved_model_cache_dir / "rft-tiny" / "config.json"
    try:
        model.read_text()
    except FileNotFoundError as error:
        reason = describe_failure(error)
    assert str(tmp_path) in reason
    hidden = hide_server_paths(reason, settings)
    assert str(tmp_path) not in hidden
    assert "<models>/rft-tiny/config.json" in hidden


def test_nested_folders_and_whole_components_only(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path / "state")
    artifacts = settings.resolved_artifacts_dir
    text = f"saved {artifacts}/job_1/checkpoint-3; state {tmp_path}/state; not {tmp_path}/stateful"
    hidden = hide_server_paths(text, settings)
    assert hidden.startswith("saved <artifacts>/job_1/checkpoint-3; state <state>; not ")
    # /tmp/.../stateful is not inside the state folder (it may be inside <tmp>).
    assert hidden.endswith("/stateful") and "<state>" not in hidden.split("; not ")[1]
    data = {"uri": f"{artifacts}/x", "steps": [1, f"{tmp_path}/state/y"], "n": 3}
    assert hide_paths_in(data, settings) == {
        "uri": "<artifacts>/x",
        "steps": [1, "<state>/y"],
        "n": 3,
    }


def test_a_dependency_environment_outside_the_prefix_is_named_for_its_packages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A checkout's thin environment reaches its dependencies in a shared folder outside
    # sys.prefix (scripts/python_env.sh); a traceback through them names that folder by role.
    shared = tmp_path / "envs" / "main-0123" / "lib" / "python3.11" / "site-packages"
    shared.mkdir(parents=True)
    monkeypatch.setattr(sys, "path", [*sys.path, str(shared)])
    text = f'File "{shared}/trl/trainer/grpo_trainer.py", line 9'
    hidden = hide_server_paths(text, Settings(state_dir=Path("/nonexistent-state")))
    assert hidden == 'File "<python packages>/trl/trainer/grpo_trainer.py", line 9'
