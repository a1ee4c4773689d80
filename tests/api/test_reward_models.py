"""Reward entries that name a reward model: validated, pre-flight checked like base models
(against a fake hub and a model root), versioned and updated like functions. No worker here:
jobs stay queued (tests/integration/test_reward_model_jobs.py trains them)."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.stack import LocalStack
from tests.conftest import tenant_client
from tests.fake_hub import fake_hub
from tests.integration.helpers import upload_jsonl
from tests.tiny import TINY_HYPERPARAMETERS

HUB_REWARD_MODEL = "rft-test/tiny-reward"
LETTER_A = "def letter_a(prompt, completion, example):\n    return completion.count('a')\n"


def model_dir(root: Path, name: str, config: dict[str, Any]) -> None:
    (root / name).mkdir()
    (root / name / "config.json").write_text(json.dumps(config))


@pytest.fixture(scope="module")
def model_root() -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="rft-reward-models-"))
    classifier = {"architectures": ["Qwen2ForSequenceClassification"], "id2label": {"0": "L"}}
    model_dir(root, "classifier", classifier)
    model_dir(root, "causal", {"architectures": ["Qwen2ForCausalLM"]})
    model_dir(root, "two-labels", {**classifier, "id2label": {"0": "bad", "1": "good"}})
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def client(model_root: Path) -> Iterator[httpx.Client]:
    """An API whose hub is the fake one; no worker: created jobs stay queued."""
    with fake_hub({HUB_REWARD_MODEL}) as endpoint:
        state_dir = Path(tempfile.mkdtemp(prefix="rft-reward-models-"))
        env = {"RFT_HUB_ENDPOINT": endpoint, "RFT_MODEL_ROOTS": str(model_root)}
        with (
            LocalStack(state_dir, workers=0, extra_env=env) as stack,
            tenant_client(stack) as http,
        ):
            yield http
        shutil.rmtree(state_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def dataset_id(client: httpx.Client) -> str:
    return upload_jsonl(client, [{"prompt": f"Say {w}:"} for w in "ab"])


def create(client: httpx.Client, dataset_id: str, rewards: dict[str, Any]) -> httpx.Response:
    return client.post(
        "/v1/jobs",
        json={
            "dataset_id": dataset_id,
            "reward_functions": rewards,
            "hyperparameters": {**TINY_HYPERPARAMETERS, "train_steps": 1},
        },
    )


@pytest.mark.parametrize(
    "entry",
    [
        {"source": LETTER_A, "model": "rft-tiny-reward"},
        {"weight": 2.0},
        {"model": "rft-tiny-reward", "function": "letter_a"},
        {"model": "rft-tiny-reward", "batch_size": 0},
    ],
    ids=["both", "neither", "a-function-setting", "bad-batch-size"],
)
def test_an_entry_gives_source_or_model_422_naming_it(
    client: httpx.Client, dataset_id: str, entry: dict[str, Any]
) -> None:
    response = create(client, dataset_id, {"judge": entry})
    assert response.status_code == 422, response.text
    problems = response.json()["detail"]
    assert all(problem["loc"][:3] == ["body", "reward_functions", "judge"] for problem in problems)
    if "weight" in entry:
        assert "either source" in problems[0]["msg"] and "or model" in problems[0]["msg"]


@pytest.mark.parametrize(
    ("model", "detail"),
    [
        ("not a model!", "is neither a built-in model (rft-tiny-reward), an absolute path"),
        ("rft-test/no-such-model", "was not found on the Hugging Face hub"),
        ("rft-tiny", "is a built-in base model (a causal language model), not a reward model"),
        ("/etc", "is not under any of the allowed model roots"),
        ("{root}/causal", "is not a sequence-classification model: its config.json names "),
        ("{root}/two-labels", "has 2 labels"),
    ],
)
def test_a_model_that_is_no_reward_model_is_400_naming_the_entry(
    client: httpx.Client, dataset_id: str, model_root: Path, model: str, detail: str
) -> None:
    model = model.format(root=model_root)
    response = create(client, dataset_id, {"judge": {"model": model}})
    assert response.status_code == 400, response.text
    assert response.json()["error"] == "UnknownRewardModel"
    message = response.json()["detail"]
    assert f"reward function 'judge': model {model!r}" in message and detail in message


def test_reward_models_are_versioned_and_updated_like_functions(
    client: httpx.Client, dataset_id: str, model_root: Path
) -> None:
    created = create(
        client,
        dataset_id,
        {
            "judge": {"model": "rft-tiny-reward", "weight": 0.5, "batch_size": 8},
            "letter_a": {"source": LETTER_A},
        },
    )
    assert created.status_code == 201, created.text
    job_id = created.json()["id"]
    config = client.get(f"/v1/jobs/{job_id}/config").json()
    assert config["reward_functions"]["judge"] == {
        "model": "rft-tiny-reward",
        "weight": 0.5,
        "batch_size": 8,
        "max_length": None,
        "version": 1,
        "label": "judge_v1",
    }

    def put(document: dict[str, Any]) -> dict[str, Any]:
        response = client.put(f"/v1/jobs/{job_id}/config", json=document, headers={"If-Match": "*"})
        assert response.status_code == 200, response.text
        return dict(response.json())

    # The GET document goes back as it is; a new weight is a new config version only.
    config["reward_functions"]["judge"]["weight"] = 2.0
    reweighted = put(config)
    assert reweighted["version"] == 2 and reweighted["changed_functions"] == []
    assert reweighted["config"]["reward_functions"]["judge"]["version"] == 1
    # Another model is a new version of the entry; the same text as code would be another.
    swapped = put(
        {
            "reward_functions": {
                "judge": {"model": HUB_REWARD_MODEL, "weight": 2.0},
                "letter_a": {"source": LETTER_A},
            }
        }
    )
    assert swapped["changed_functions"] == ["judge"]
    assert swapped["config"]["reward_functions"]["judge"]["label"] == "judge_v2"
    assert swapped["applies_from_step"] == 1  # queued: its first step
    # A model path only the workers have: accepted, with a warning event.
    elsewhere = str(model_root / "on-the-workers-only")
    put({"reward_functions": {"judge": {"model": elsewhere}}})
    events = client.get(f"/v1/jobs/{job_id}/events/history").json()["data"]
    assert any(
        e["kind"] == "warning"
        and "'judge': model" in e["message"]
        and "on-the-workers-only' does not exist on the API host" in e["message"]
        for e in events
    )
    refused = client.put(
        f"/v1/jobs/{job_id}/config",
        json={"reward_functions": {"judge": {"model": str(model_root / "causal")}}},
        headers={"If-Match": "*"},
    )
    assert refused.status_code == 400 and "'judge'" in refused.json()["detail"]
    versions = client.get(f"/v1/jobs/{job_id}/config/versions").json()
    assert [v["reward_functions"]["judge"]["version"] for v in versions] == [1, 1, 2, 3]


def test_a_test_run_checks_reward_models_and_scores_the_functions(
    client: httpx.Client, model_root: Path
) -> None:
    body: dict[str, Any] = {
        "reward_functions": {
            "letter_a": {"source": LETTER_A, "weight": 2.0},
            "judge": {"model": str(model_root / "classifier")},
        },
        "samples": [{"prompt": "Say a", "completion": "banana"}],
    }
    response = client.post("/v1/reward-functions/test", json=body)
    assert response.status_code == 200, response.text
    result = response.json()
    assert result["not_scored"] == ["judge"]
    assert result["results"]["judge"]["form"] == "model"
    assert result["results"]["judge"]["scores"] == [None]
    assert result["totals"] == [6.0]  # letter_a's only: the model did not run
    body["reward_functions"]["judge"]["model"] = str(model_root / "causal")
    refused = client.post("/v1/reward-functions/test", json=body)
    assert refused.status_code == 400 and "'judge'" in refused.json()["detail"]
