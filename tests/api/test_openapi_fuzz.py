"""Property-based fuzzing of every operation in our OpenAPI document: no input is a 5xx.

Schemathesis generates requests from the API's OpenAPI document (valid ones, and invalid
ones: wrong types, out-of-range numbers, NUL bytes, odd Unicode, missing fields) and sends
them over HTTP to a real API process on a real Postgres. Any 5xx fails the test and shows the
request.

The document is built from the app at import time (the same code the API process serves),
because Schemathesis turns each operation into a test item at collection, before any server
runs; its fixture-based loader does not work with pytest 9.2 (it sets a private node field).

The API under fuzz is the API tests' idle stack (tests/api/conftest.py), which has no
training worker: fuzzed requests create jobs with arbitrary hyperparameters, which must never
reach the session's worker (it would spend the rest of the suite training them) and would not
stay out of reach on a database a worker shares (workers re-queue jobs that wait too long).

Budget: at most MAX_EXAMPLES generated requests per operation, plus Schemathesis's coverage
cases (boundary and type-confusion values derived from the schema, the cases that find most),
derandomized so that a run is repeatable. Of the coverage cases, one of each kind (scenario)
per parameter of each operation is sent: the large bodies (a job's hyperparameters, a
grader) made thousands of near-repeats per operation (13,730 requests, 140 s of requests on 2
cores), each kind of value into each field once keeps every field of every operation fuzzed.
"""

from __future__ import annotations

import json
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, settings
from schemathesis.generation.meta import CoveragePhaseData

from service.app import create_app
from service.stack import LocalStack
from tests.conftest import new_tenant_key

MAX_EXAMPLES = 20
# Operations that forward to a server this stack does not run (the inference server) answer
# 503 Service Unavailable by design here; their input is still fuzzed up to that point, and
# any other 5xx from them fails.
FORWARDED_TO_SERVICES_NOT_RUN = ("/v1/chat/", "/v1/completions")
REQUEST_TIMEOUT_S = 60
SOURCE = "def f(prompt, completion, example):\n    return 1.0\n"


@dataclass
class FuzzTarget:
    """The fuzzed API, signed in as a tenant that owns a dataset, and a job per operation."""

    stack: LocalStack
    key: str
    dataset_id: str
    jobs: dict[str, str] = field(default_factory=dict)
    requests: dict[str, int] = field(default_factory=dict)
    coverage_kinds: set[tuple[str, ...]] = field(default_factory=set)
    seconds: dict[str, float] = field(default_factory=dict)

    def client(self) -> httpx.Client:
        return httpx.Client(
            base_url=self.stack.base_url,
            headers={"Authorization": f"Bearer {self.key}"},
            timeout=REQUEST_TIMEOUT_S,
        )

    def job_for(self, operation: str) -> str:
        """A job of the operation's own, so that one operation's effects (a cancel, a config
        update) do not change what the next one meets. The event stream's job is cancelled,
        so that its stream ends (a queued job's would wait for a worker that never comes)."""
        if operation not in self.jobs:
            with self.client() as http:
                job = http.post(
                    "/v1/jobs",
                    json={
                        "dataset_id": self.dataset_id,
                        "reward_functions": {"f": {"source": SOURCE}},
                        "hyperparameters": {"train_steps": 1},
                    },
                )
                assert job.status_code == 201, job.text
                job_id = job.json()["id"]
                if operation.endswith("/events"):
                    http.post(f"/v1/jobs/{job_id}/cancel").raise_for_status()
            self.jobs[operation] = job_id
        return self.jobs[operation]


@pytest.fixture(scope="module")
def fuzz_target(idle_stack: LocalStack) -> Iterator[FuzzTarget]:
    key = new_tenant_key(idle_stack)
    rows = "\n".join(json.dumps({"prompt": f"p{i}", "answer": i}) for i in range(4))
    with httpx.Client(
        base_url=idle_stack.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=60
    ) as http:
        dataset = http.post("/v1/datasets", files={"file": ("d.jsonl", rows.encode())})
        assert dataset.status_code == 201, dataset.text
    target = FuzzTarget(idle_stack, key, dataset.json()["id"])
    yield target
    slowest = sorted(target.seconds.items(), key=lambda item: -item[1])[:8]
    print(
        f"\nfuzz: {sum(target.requests.values())} requests in {sum(target.seconds.values()):.0f} s;"
        " slowest operations: "
        + ", ".join(f"{op} {t:.0f} s / {target.requests[op]}" for op, t in slowest)
    )


schema = schemathesis.openapi.from_dict(create_app().openapi())


def _pick(case: schemathesis.Case, salt: str) -> bool:
    """A repeatable coin flip per generated case: half of the cases get our real ids, so
    that fuzzing reaches the code behind the 404 of an unknown id."""
    return zlib.crc32(f"{salt}{case.path_parameters}{case.query}".encode()) % 2 == 0


def first_of_its_kind(case: schemathesis.Case, target: FuzzTarget) -> bool:
    """False for a coverage case whose kind (scenario) this operation's parameter has met."""
    phase = case.meta.phase if case.meta is not None else None
    if phase is None or not isinstance(phase.data, CoveragePhaseData):
        return True
    data = phase.data
    kind = (
        case.operation.label,
        str(data.scenario),
        str(data.parameter_location),
        str(data.parameter),
        str(data.location),
    )
    if kind in target.coverage_kinds:
        return False
    target.coverage_kinds.add(kind)
    return True


@schema.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    derandomize=True,
    deadline=None,
    database=None,
    # The shrink phase is left out: a failure prints the request as generated, and shrinking
    # it would add many requests to a run that already failed.
    phases=[Phase.explicit, Phase.generate],
    # Generated values are rejected by our own filters rarely; requests are slow on purpose.
    suppress_health_check=list(HealthCheck),
)
def test_no_input_gets_a_server_error(case: schemathesis.Case, fuzz_target: FuzzTarget) -> None:
    operation = case.operation.label
    if not first_of_its_kind(case, fuzz_target):
        return
    if "job_id" in case.path_parameters and _pick(case, "job"):
        case.path_parameters["job_id"] = fuzz_target.job_for(operation)
    if "dataset_id" in case.path_parameters and _pick(case, "dataset"):
        case.path_parameters["dataset_id"] = fuzz_target.dataset_id
    if isinstance(case.body, dict) and "dataset_id" in case.body and _pick(case, "body"):
        case.body["dataset_id"] = fuzz_target.dataset_id
    # One case in eight keeps its generated Authorization header, to fuzz the key check too.
    if zlib.crc32(repr(case.headers).encode()) % 8 != 0 or "Authorization" not in case.headers:
        case.headers["Authorization"] = f"Bearer {fuzz_target.key}"

    fuzz_target.requests[operation] = fuzz_target.requests.get(operation, 0) + 1
    started = time.monotonic()
    response = case.call(base_url=fuzz_target.stack.base_url, timeout=REQUEST_TIMEOUT_S)
    fuzz_target.seconds[operation] = (
        fuzz_target.seconds.get(operation, 0.0) + time.monotonic() - started
    )
    if response.status_code == 503 and case.path.startswith(FORWARDED_TO_SERVICES_NOT_RUN):
        return
    assert response.status_code < 500, (
        f"{operation} answered {response.status_code}: {response.text[:500]}\n"
        f"request: {case!r:.2000}\nAPI log: {fuzz_target.stack.log_dir / 'api.log'}"
    )
