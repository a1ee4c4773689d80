"""A training job with allow_network, end to end: its reward functions run in the worker's
rank process sandbox, reach a public host (a network namespace of the tests' own) through the
egress proxy, and get a typed error, not a connection, when they try the stack's own Redis, the
API or a metadata address; the job trains to the end."""

from __future__ import annotations

from urllib.parse import urlsplit

import httpx
import pytest

from service.stack import LocalStack
from tests.integration.helpers import all_pages, create_job, upload_jsonl, wait_for
from tests.public_network import GREETING, PublicHost
from tests.tiny import TINY_HYPERPARAMETERS

pytestmark = pytest.mark.integration

PUBLIC = """
import urllib.request

def public(prompt, completion, example):
    body = urllib.request.urlopen(example["public"], timeout=10).read().decode()
    return float(body.startswith(example["greeting"]))
"""
# One row in four tries a service of the stack: a quarter of the samples fail, below the
# circuit breaker's limit, and the pre-flight rows score.
INTERNAL = """
import urllib.request

def internal(prompt, completion, example):
    if example["n"] % 4 == 3:
        urllib.request.urlopen(example["internal"], timeout=10)
        return 1.0
    return 0.5
"""


def test_a_networked_job_reaches_public_hosts_and_none_of_the_stack(
    client: httpx.Client, stack: LocalStack, public_side: PublicHost
) -> None:
    redis = urlsplit(stack.redis_url or "")
    internal = [
        f"http://{redis.hostname}:{redis.port}/",
        f"{stack.base_url}/readyz",
        "http://169.254.169.254/latest/meta-data/",
        "http://10.0.0.1/",
    ]
    rows = [
        {
            "prompt": f"Word {n}:",
            "n": n,
            "public": f"{public_side.http_url}/job",
            "greeting": GREETING,
            "internal": internal[(n // 4) % len(internal)],
        }
        for n in range(8)
    ]
    steps = 3
    job = create_job(
        client,
        {
            "dataset_id": upload_jsonl(client, rows),
            "reward_functions": {
                "public": {"source": PUBLIC},
                "internal": {"source": INTERNAL},
            },
            "hyperparameters": {**TINY_HYPERPARAMETERS, "train_steps": steps},
            "allow_network": True,
        },
    )
    job = wait_for(client, job["id"])
    assert job["status"] == "succeeded", job["failure_reason"]

    completions = all_pages(client, f"/v1/jobs/{job['id']}/completions")
    assert completions and all(row["scores"]["public"] == 1.0 for row in completions)
    errors = all_pages(client, f"/v1/jobs/{job['id']}/reward-errors")
    assert errors and {error["function_name"] for error in errors} == {"internal"}
    for error in errors:
        assert error["kind"] == "exception"
        assert "refused by the egress policy" in error["message"], error
