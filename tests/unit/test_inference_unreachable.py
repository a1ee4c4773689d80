"""Chat completions while no inference server listens: a 503 that names the setting. A unit
test, so it holds whatever the session's stack has started (its inference server may already
run when an integration test reaches this point)."""

from __future__ import annotations

import pytest

from service.embedded import free_port
from service.inference.protocol import GenerationRequest
from service.inference.service import InferenceUnavailable, ServedModel, _send
from service.settings import Settings


def test_an_unreachable_inference_server_is_a_503_naming_the_setting() -> None:
    settings = Settings(inference_url=f"http://127.0.0.1:{free_port()}")  # nobody listens
    request = GenerationRequest(
        base_model="rft-tiny",
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=4,
        temperature=1.0,
        top_p=1.0,
        n=1,
    )
    with pytest.raises(InferenceUnavailable) as raised:
        _send(ServedModel("rft-tiny", "rft-tiny", None), request, settings)
    assert raised.value.status_code == 503
    assert f"RFT_INFERENCE_URL={settings.inference_url}" in str(raised.value)


def test_no_inference_server_configured_is_a_503_naming_the_setting() -> None:
    request = GenerationRequest(
        base_model="rft-tiny", prompt="hi", max_tokens=4, temperature=1.0, top_p=1.0, n=1
    )
    with pytest.raises(InferenceUnavailable, match="set RFT_INFERENCE_URL") as raised:
        _send(ServedModel("rft-tiny", "rft-tiny", None), request, Settings(inference_url=None))
    assert raised.value.status_code == 503
