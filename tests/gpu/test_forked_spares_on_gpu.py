"""Spares forked from the worker's template (``RFT_SPARE_FORK=always``) on a CUDA machine.

``auto`` forks only where the driver lists no GPU: a CUDA driver started before a fork is
unusable in the child, and whether the template's imports (vLLM's, DeepSpeed's) start it has
not been verified on a GPU. This test is that verification: two jobs back to back, each in a
spare forked from one template, both train on the GPU in bf16. When it passes on a GPU,
``auto`` may fork there too (docs/architecture.md, "Where a spare comes from").
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from service.stack import LocalStack
from tests.conftest import tenant_client
from tests.gpu.conftest import stack_on_one_gpu
from tests.integration.helpers import all_pages, train_a_share_job
from tests.integration.multi_rank_jobs import worker_logs
from workers.training.spare import FORKED_SPARE

pytestmark = pytest.mark.integration

GPUS_NEEDED = 1


@pytest.fixture(scope="module")
def forking_gpu_stack() -> Iterator[LocalStack]:
    with stack_on_one_gpu("rft-forked-gpu-", RFT_SPARE_FORK="always") as stack:
        yield stack


def test_back_to_back_jobs_in_forked_spares_train_on_the_gpu(
    forking_gpu_stack: LocalStack,
) -> None:
    http: httpx.Client
    with tenant_client(forking_gpu_stack) as http:
        jobs = [train_a_share_job(http, train_steps=2) for _ in range(2)]
        for job in jobs:
            assert job["status"] == "succeeded", job.get("failure_reason")
            steps = all_pages(http, f"/v1/jobs/{job['id']}/steps")
            assert [step["step"] for step in steps] == [1, 2]
    logs = worker_logs(forking_gpu_stack).splitlines()
    trained_on = [line for line in logs if "training on " in line]
    assert len(trained_on) == 2, trained_on
    assert all("training on cuda" in line and "bfloat16" in line for line in trained_on)
    # Both jobs trained in forked spares (a new Python per spare does not log this line).
    assert sum(FORKED_SPARE in line for line in logs) >= 2, logs[-40:]
