"""POST /v1/reward-functions/test with allow_network, as a tenant would try it: the reward code
runs in the API's sandbox, and reaches a public host (a network namespace of the tests' own)
but none of the stack's services (Redis, Postgres, the API, the inference server) nor private
or metadata addresses. Each refusal is the function's own typed error; the test goes on."""

from __future__ import annotations

from urllib.parse import urlsplit

import httpx

from service.stack import LocalStack
from tests.public_network import GREETING, PublicHost

FETCH = """
import ssl, urllib.request

def fetch(prompt, completion, example):
    insecure = ssl.create_default_context()
    insecure.check_hostname = False
    insecure.verify_mode = ssl.CERT_NONE
    body = urllib.request.urlopen(example["url"], timeout=10, context=insecure).read().decode()
    print(body)
    return 1.0
"""
RAW = """
import socket

def raw(prompt, completion, example):
    try:
        socket.create_connection(("127.0.0.1", example["port"]), timeout=2).close()
    except OSError:
        return 0.0
    return 1.0
"""


def stack_urls(stack: LocalStack) -> list[str]:
    """Every service of the stack that listens on TCP, as a URL user code could try."""
    urls = [stack.base_url + "/readyz", stack.inference_url + "/healthz"]
    for url in (stack.redis_url, stack.database_url):
        parts = urlsplit(url or "")
        if parts.hostname and parts.port:  # the embedded Postgres listens on a unix socket only
            urls.append(f"http://{parts.hostname}:{parts.port}/")
    return urls


def test_the_test_endpoint_reaches_public_hosts_and_none_of_the_stack(
    client: httpx.Client, stack: LocalStack, public_side: PublicHost
) -> None:
    forbidden = [
        *stack_urls(stack),
        f"http://localhost:{stack.api_port}/readyz",
        "http://169.254.169.254/latest/meta-data/",
        "http://10.0.0.1/",
        "https://172.16.0.1/",
        "http://192.168.0.1/",
    ]
    allowed = [f"{public_side.http_url}/plain", f"{public_side.https_url}/secure"]
    samples = [
        {"prompt": "p", "completion": "c", "example": {"url": url}} for url in allowed + forbidden
    ]
    response = client.post(
        "/v1/reward-functions/test",
        json={
            "reward_functions": {"fetch": {"source": FETCH}},
            "samples": samples,
            "allow_network": True,
        },
        timeout=120,
    )
    assert response.status_code == 200, response.text
    result = response.json()["results"]["fetch"]
    assert result["scores"] == [1.0] * len(allowed) + [None] * len(forbidden), result
    assert f"{GREETING} /plain" in result["logs"] and f"{GREETING} /secure" in result["logs"]
    errors = {error["sample_index"]: error for error in result["errors"]}
    assert sorted(errors) == list(range(len(allowed), len(samples)))
    for error in errors.values():
        assert error["kind"] == "exception"
        assert "refused by the egress policy" in error["message"], error


def test_raw_sockets_reach_none_of_the_stack_with_the_network(
    client: httpx.Client, stack: LocalStack
) -> None:
    ports = [urlsplit(url).port for url in stack_urls(stack)]
    response = client.post(
        "/v1/reward-functions/test",
        json={
            "reward_functions": {"raw": {"source": RAW}},
            "samples": [
                {"prompt": "p", "completion": "c", "example": {"port": port}} for port in ports
            ],
            "allow_network": True,
        },
        timeout=120,
    )
    assert response.status_code == 200, response.text
    assert response.json()["results"]["raw"]["scores"] == [0.0] * len(ports)
