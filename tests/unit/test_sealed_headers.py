"""Header values written into a request with no job secrets (OpenAI's API) become job secrets."""

from __future__ import annotations

import pytest

from service.http_tools.service import InvalidEndpoint, seal_header_values
from service.secrets import MAX_SECRETS, check_secrets


def test_literal_values_become_secrets_and_references_stay() -> None:
    secrets = {"WANDB_API_KEY": "w"}
    headers = {
        "Authorization": "Bearer t-1",
        "X-Already": "Bearer {{secrets.WANDB_API_KEY}}",
        "x-api-key": "k-2",
    }
    sealed = seal_header_values(headers, "tool lookup", secrets)
    assert sealed == {
        "Authorization": "{{secrets.HEADER_TOOL_LOOKUP_AUTHORIZATION}}",
        "X-Already": "Bearer {{secrets.WANDB_API_KEY}}",
        "x-api-key": "{{secrets.HEADER_TOOL_LOOKUP_X_API_KEY}}",
    }
    assert secrets == {
        "WANDB_API_KEY": "w",
        "HEADER_TOOL_LOOKUP_AUTHORIZATION": "Bearer t-1",
        "HEADER_TOOL_LOOKUP_X_API_KEY": "k-2",
    }
    check_secrets(secrets)  # names a job accepts


def test_names_that_meet_get_a_suffix() -> None:
    secrets: dict[str, str] = {}
    seal_header_values({"X-Key": "a"}, "tool a-b", secrets)
    seal_header_values({"X-Key": "b"}, "tool a_b", secrets)
    assert secrets == {"HEADER_TOOL_A_B_X_KEY": "a", "HEADER_TOOL_A_B_X_KEY_2": "b"}


def test_more_than_a_job_holds_is_a_400_naming_the_header() -> None:
    secrets = {f"S{i}": "v" for i in range(MAX_SECRETS)}
    with pytest.raises(InvalidEndpoint, match=r"'X-Key'.*at most 32 secrets"):
        seal_header_values({"X-Key": "a"}, "tool t", secrets)
