from __future__ import annotations

import pytest
from pydantic import SecretStr

from service.errors import Forbidden, Unauthorized
from service.observability import check_metrics_token


@pytest.mark.parametrize("token", [None, SecretStr("")])
def test_metrics_are_off_without_a_token_even_for_an_empty_bearer(token: SecretStr | None) -> None:
    for authorization in (None, "Bearer ", "Bearer"):
        with pytest.raises(Forbidden):
            check_metrics_token(token, authorization)


def test_only_the_token_as_a_bearer_reads_metrics() -> None:
    token = SecretStr("s3cret-token")
    check_metrics_token(token, "Bearer s3cret-token")
    check_metrics_token(token, "bearer  s3cret-token ")
    for authorization in (
        None,
        "",
        "Bearer ",
        "Bearer s3cret",
        "Basic s3cret-token",
        "s3cret-token",
    ):
        with pytest.raises(Unauthorized):
            check_metrics_token(token, authorization)
