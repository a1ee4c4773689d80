"""Input that used to be a 500: each class is now a 4xx that names the problem.

Found by fuzzing (tests/api/test_openapi_fuzz.py) and by hand: numbers past the database's
integer range, NUL characters, JSON that Python parses but Postgres cannot store (NaN,
Infinity, lone surrogates, deep nesting, huge integers), over-long dataset names.
"""

from __future__ import annotations

import json

import httpx
import pytest

from service.jobs.hyperparameters import Hyperparameters
from tests.tiny import TINY_HYPERPARAMETERS

SOURCE = "def f(prompt, completion, example):\n    return 1.0\n"
INT32_PAST = 2**31
INT64_PAST = 2**63
DEEP = "[" * 100_000 + "]" * 100_000


def jsonl(rows: list[dict]) -> bytes:
    return "\n".join(json.dumps(row) for row in rows).encode()


@pytest.fixture
def dataset_id(client: httpx.Client) -> str:
    rows = jsonl([{"prompt": f"p{i}"} for i in range(4)])
    response = client.post("/v1/datasets", files={"file": ("d.jsonl", rows)})
    assert response.status_code == 201, response.text
    return response.json()["id"]


@pytest.fixture
def job_id(client: httpx.Client, dataset_id: str) -> str:
    response = client.post(
        "/v1/jobs",
        json={
            "dataset_id": dataset_id,
            "reward_functions": {"f": {"source": SOURCE}},
            "hyperparameters": {**TINY_HYPERPARAMETERS, "train_steps": 1},
        },
    )
    assert response.status_code == 201, response.text
    job_id = response.json()["id"]
    client.post(f"/v1/jobs/{job_id}/cancel")  # nothing here needs it to train
    return job_id


def post_raw_json(
    client: httpx.Client, path: str, text: str, method: str = "POST"
) -> httpx.Response:
    """Send JSON text as written (json.dumps cannot write NaN or lone surrogates on purpose)."""
    return client.request(
        method, path, content=text.encode("utf-8", "surrogatepass"),
        headers={"Content-Type": "application/json"},
    )  # fmt: skip


@pytest.mark.parametrize(
    ("path", "params", "named"),
    [
        ("steps", {"after_step": INT32_PAST}, "after_step"),
        ("completions", {"step": INT32_PAST}, "step"),
        ("logs", {"step": INT32_PAST}, "step"),
        ("reward-errors", {"step": INT32_PAST}, "step"),
        ("logs", {"after": INT64_PAST}, "after"),
        ("reward-errors", {"after": INT64_PAST}, "after"),
        ("events/history", {"after": INT64_PAST}, "after"),
        ("checkpoints/2147483648/adapter.tar.gz", {}, "step"),
        ("checkpoints/99999999999999999999999/adapter.tar.gz", {}, "step"),
    ],
)
def test_integers_past_the_columns_range_are_422_with_the_range(
    client: httpx.Client, job_id: str, path: str, params: dict, named: str
) -> None:
    response = client.get(f"/v1/jobs/{job_id}/{path}", params=params)
    assert response.status_code == 422, response.text
    problem = response.json()["detail"][0]
    assert problem["loc"][-1] == named and problem["type"] == "less_than_equal"


@pytest.mark.parametrize(
    "cursor",
    [
        "2147483648:1",  # step past integer
        "1:9223372036854775808",  # id past bigint
        "²:1",  # str.isdigit() says yes, int() says no
        "١:٢",  # noqa: RUF001 - Arabic-Indic digits
        "1:2:3",
    ],
)
def test_malformed_completion_cursors_are_refused(
    client: httpx.Client, job_id: str, cursor: str
) -> None:
    response = client.get(f"/v1/jobs/{job_id}/completions", params={"after": cursor})
    assert response.status_code in (400, 422), response.text
    assert "after" in response.text or "cursor" in response.text
    # The cursors the API hands out still work.
    assert client.get(f"/v1/jobs/{job_id}/completions", params={"after": "3:17"}).status_code == 200


@pytest.mark.parametrize(
    "cursor",
    ["s9999999999.e1", "s1.e9999999999999999999", "s١.e1"],  # noqa: RUF001
)
def test_malformed_event_stream_cursors_are_400(
    client: httpx.Client, job_id: str, cursor: str
) -> None:
    response = client.get(f"/v1/jobs/{job_id}/events", params={"after": cursor})
    assert response.status_code == 400, response.text
    assert "invalid event stream cursor" in response.json()["detail"]


@pytest.mark.parametrize(
    ("path", "params"),
    [
        ("/v1/jobs/job_%00x", {}),
        ("/v1/datasets/ds_%00x", {}),
        ("/v1/jobs", {"after": "job_\x00"}),
        ("/v1/datasets", {"after": "ds_\x00"}),
        ("/v1/jobs/{job}/logs", {"function": "f\x00"}),
        ("/v1/jobs/{job}/reward-errors", {"function": "f\x00"}),
        ("/v1/jobs/{job}/events", {"after": "s1.e1\x00"}),
    ],
)
def test_nul_in_the_url_is_400(client: httpx.Client, job_id: str, path: str, params: dict) -> None:
    response = client.get(path.format(job=job_id), params=params)
    assert response.status_code == 400, response.text
    assert response.json()["detail"] == "the URL holds a NUL character (%00)"


@pytest.mark.parametrize(
    ("field", "named"),
    [
        ('"dataset_id": "ds_\\u0000"', "$.dataset_id"),
        ('"name": "a\\u0000"', "$.name"),
        ('"reward_functions": {"f\\u0000": {"source": "x"}}', 'key "f\\u0000"'),
        ('"name": "\\udc00"', "lone UTF-16 surrogate"),
        ('"hyperparameters": {"learning_rate": NaN}', "NaN"),
        ('"hyperparameters": {"beta": Infinity}', "Infinity"),
        ('"hyperparameters": {"beta": 1e400}', "1e400"),
        ('"reward_functions": {"f": {"source": "x", "weight": -Infinity}}', "-Infinity"),
        ('"hyperparameters": {"seed": ' + "9" * 5000 + "}", "more than 4300 digits"),
        ('"name": ' + DEEP, "nested deeper than 64"),
    ],
)
def test_unstorable_json_in_a_job_is_400_naming_the_place(
    client: httpx.Client, dataset_id: str, field: str, named: str
) -> None:
    before = len(client.get("/v1/jobs").json()["data"])
    # The later of two equal keys wins as Python reads JSON: `field` replaces a default.
    defaults = f'"dataset_id": "{dataset_id}", "reward_functions": {{"f": {{"source": "x"}}}}'
    response = post_raw_json(client, "/v1/jobs", f"{{{defaults}, {field}}}")
    assert response.status_code == 400, response.text
    assert response.json()["error"] == "InvalidJsonBody"
    assert named in response.json()["detail"]
    assert len(client.get("/v1/jobs").json()["data"]) == before


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ('{"reward_functions": {"f": {"source": "x", "weight": NaN}}}', "NaN"),
        ('{"reward_functions": {"f": {"source": "x"}}, "temperature": Infinity}', "Infinity"),
        ('{"reward_functions": {"f": {"source": "a\\ud83d"}}}', "$.reward_functions.f.source"),
    ],
)
def test_unstorable_json_in_a_dry_run_is_400(
    client: httpx.Client, job_id: str, body: str, named: str
) -> None:
    response = post_raw_json(client, f"/v1/jobs/{job_id}/config?dry_run=true", body, "PUT")
    assert response.status_code == 400, response.text
    assert named in response.json()["detail"]


def test_unstorable_json_in_reward_function_samples_is_400(client: httpx.Client) -> None:
    source = json.dumps(SOURCE)
    body = (
        f'{{"reward_functions": {{"f": {{"source": {source}}}}}, "samples": '
        '[{"prompt": "p", "completion": "c", "example": {"a\\u0000": 1}}]}'
    )
    response = post_raw_json(client, "/v1/reward-functions/test", body)
    assert response.status_code == 400, response.text
    assert "$.samples[0].example" in response.json()["detail"]


def test_the_hyperparameters_model_refuses_non_finite_numbers() -> None:
    # The JSON guard stops NaN at the door; the model refuses it too (SDK, YAML, workers).
    with pytest.raises(ValueError, match="finite"):
        Hyperparameters(beta=float("inf"))


def test_a_preset_that_is_not_a_name_is_422(client: httpx.Client, dataset_id: str) -> None:
    response = client.post(
        "/v1/jobs",
        json={
            "dataset_id": dataset_id,
            "reward_functions": {"f": {"source": SOURCE}},
            "hyperparameters": {"preset": {"a": 1}},
        },
    )
    assert response.status_code == 422, response.text


@pytest.mark.parametrize(
    ("content", "named"),
    [
        (b'{"prompt": "a\\u0000b"}', "line 1: $.prompt holds a NUL character"),
        (b'{"prompt": "ab"}\n{"prompt": "ab", "k\\u0000": 1}', 'line 2: $ has a key "k\\u0000"'),
        (b'{"prompt": "ab", "x": NaN}', "line 1: NaN"),
        (b'{"prompt": "ab", "x": [1e999]}', "line 1: the number 1e999"),
        (b'{"prompt": "ab\\ud800"}', "line 1: $.prompt holds a lone UTF-16 surrogate"),
        (b'{"prompt": "ab", "x": ' + DEEP.encode() + b"}", "line 1: nested deeper than 64"),
        (b'{"prompt": "ab", "x": ' + b"9" * 5000 + b"}", "more than 4300 digits"),
    ],
)
def test_unstorable_jsonl_rows_are_400_naming_the_line(
    client: httpx.Client, content: bytes, named: str
) -> None:
    response = client.post("/v1/datasets", files={"file": ("d.jsonl", content)})
    assert response.status_code == 400, response.text
    assert response.json()["error"] == "InvalidDataset"
    assert named in response.json()["detail"]


def test_nul_in_a_csv_cell_is_400(client: httpx.Client) -> None:
    response = client.post("/v1/datasets", files={"file": ("d.csv", b"prompt,x\nhello,a\x00b\n")})
    assert response.status_code == 400, response.text
    assert "row 1: $.x holds a NUL character" in response.json()["detail"]


def test_big_integers_within_the_limit_are_kept(client: httpx.Client) -> None:
    response = client.post(
        "/v1/datasets", files={"file": ("d.jsonl", b'{"prompt": "ab", "x": %d}' % 10**30)}
    )
    assert response.status_code == 201, response.text
    detail = client.get(f"/v1/datasets/{response.json()['id']}").json()
    assert detail["preview"][0]["x"] == 10**30


@pytest.mark.parametrize(
    ("filename", "form", "status", "named"),
    [
        ("d.jsonl", {"name": "n" * 301}, 422, "at most 300 characters"),
        ("d" * 400 + ".jsonl", {}, 400, "the file name has 406 characters; the limit is 300"),
        ("d.jsonl", {"name": "a\x00b"}, 400, "the name holds a NUL character"),
    ],
)
def test_dataset_names_that_cannot_be_stored_are_refused(
    client: httpx.Client, filename: str, form: dict, status: int, named: str
) -> None:
    rows = jsonl([{"prompt": "p"}])
    response = client.post("/v1/datasets", files={"file": (filename, rows)}, data=form)
    assert response.status_code == status, response.text
    assert named in response.text


def test_a_long_file_name_is_fine_with_a_name(client: httpx.Client) -> None:
    rows = jsonl([{"prompt": "p"}])
    response = client.post(
        "/v1/datasets", files={"file": ("d" * 400 + ".jsonl", rows)}, data={"name": "short"}
    )
    assert response.status_code == 201, response.text
    assert response.json()["name"] == "short"


@pytest.mark.parametrize(
    "body",
    [
        {"reward_functions": {"f": {"source": "-" * 100_000 + "1"}}},
        {"reward_functions": {"f": {"source": "x" + ".y" * 90_000}}},
        {"reward_module": {"source": "-" * 100_000 + "1", "functions": {"f": {}}}},
    ],
)
def test_reward_code_nested_past_the_parser_is_400(client: httpx.Client, body: dict) -> None:
    # CPython's parser gives up on these with RecursionError or MemoryError.
    response = client.post(
        "/v1/reward-functions/test",
        json={**body, "samples": [{"prompt": "p", "completion": "c"}]},
    )
    # A module is split into functions while the body is validated: a 422 there.
    assert response.status_code in (400, 422), response.text[:300]
    assert "its expressions are nested too deeply" in response.text
