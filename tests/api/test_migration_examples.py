"""docs/migrate-from-openai.md's examples run as the page says, with the official openai
package: each block after a ``<!-- example: NAME -->`` marker is read from the page itself
(files uploaded, graders validated and run, Python executed), and each refusal the page quotes
is the error users get. Jobs are created and cancelled at once: nothing here trains."""

from __future__ import annotations

import contextlib
import io
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from service.stack import LocalStack

PAGE = Path(__file__).resolve().parents[2] / "docs" / "migrate-from-openai.md"
EXAMPLE = re.compile(r"<!-- example: ([\w-]+) -->\n```(\w+)\n(.*?)\n```", re.DOTALL)
# The page's base model; the test trains nothing, so it creates its jobs on the built-in one
# (the only model an offline test stack can check), which is the one change the page names.
PAGE_MODEL = '"Qwen/Qwen2.5-1.5B-Instruct"'
TEST_MODEL = '"rft-tiny"'
ANSWER = {"reference_answer": "42"}


def page_examples() -> dict[str, tuple[str, str]]:
    found: dict[str, tuple[str, str]] = {}
    for name, language, text in EXAMPLE.findall(PAGE.read_text()):
        assert name not in found, f"two examples named {name!r}"
        found[name] = (language, text)
    return found


EXAMPLES = page_examples()


def example(name: str) -> str:
    return EXAMPLES[name][1]


def grader(name: str) -> dict[str, Any]:
    assert EXAMPLES[name][0] == "json"
    value = json.loads(example(name))
    assert isinstance(value, dict)
    return value


def run_python(name: str, namespace: dict[str, Any]) -> str:
    """Executes the example in ``namespace`` (its variables stay there); returns its stdout."""
    assert EXAMPLES[name][0] == "python"
    source = example(name).replace(PAGE_MODEL, TEST_MODEL)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(source, f"<{PAGE.name}: {name}>", "exec"), namespace)
    return printed.getvalue()


@pytest.fixture
def namespace(
    stack: LocalStack, api_key: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[dict[str, Any]]:
    """The page's `client` example run against the test stack (its URL and key put in): what
    the other Python examples run in, from a folder holding the page's two files."""
    monkeypatch.chdir(tmp_path)
    source = example("client").replace("http://localhost:8000/v1", f"{stack.base_url}/v1")
    source = source.replace('"rft_..."', repr(api_key))
    scope: dict[str, Any] = {}
    exec(compile(source, f"<{PAGE.name}: client>", "exec"), scope)
    client = scope["client"]
    assert isinstance(client, openai.OpenAI)
    scope["client"] = client.with_options(max_retries=0)
    yield scope
    client.close()


def upload(namespace: dict[str, Any], file_example: str) -> Any:
    assert EXAMPLES[file_example][0] == "jsonl"
    Path("train.jsonl").write_text(example(file_example) + "\n")
    run_python("upload", namespace)
    return namespace["train"]


def test_every_example_on_the_page_is_run_here() -> None:
    tested = {
        "client",
        "sft-file",
        "rft-file",
        "upload",
        "string-check-grader",
        "text-similarity-grader",
        "python-grader",
        "python-grader-with-an-import",
        "score-model-grader",
        "multi-grader",
        "grader-calls",
        "rft-job",
        "sft-job",
    }
    assert set(EXAMPLES) == tested
    assert example("rft-job").count(PAGE_MODEL) == 1 and example("sft-job").count(PAGE_MODEL) == 1


def test_both_files_upload_as_they_are(namespace: dict[str, Any]) -> None:
    client = namespace["client"]
    for name in ("sft-file", "rft-file"):
        train = upload(namespace, name)
        assert train.id and train.purpose == "fine-tune"
        rows = [json.loads(line) for line in example(name).splitlines()]
        back = [json.loads(line) for line in client.files.content(train.id).text.splitlines()]
        assert back == rows  # messages and the graders' fields, unchanged


@pytest.mark.parametrize(
    "name", ["string-check-grader", "text-similarity-grader", "python-grader", "multi-grader"]
)
def test_graders_that_run_as_they_are(namespace: dict[str, Any], name: str) -> None:
    client = namespace["client"]
    given = grader(name)
    client.fine_tuning.alpha.graders.validate(grader=given)
    right = client.fine_tuning.alpha.graders.run(grader=given, model_sample="42", item=ANSWER)
    wrong = client.fine_tuning.alpha.graders.run(grader=given, model_sample="7", item=ANSWER)
    assert right.reward == pytest.approx(1.0), right
    assert wrong.reward < 0.5, wrong
    assert not right.metadata.errors.python_grader_runtime_error
    assert right.metadata.name == given["name"]


def test_the_grader_calls_print_what_the_page_says(namespace: dict[str, Any]) -> None:
    namespace["grader"] = grader("multi-grader")
    printed = run_python("grader-calls", namespace)
    comment = re.search(r"# (.*) for the multi grader", example("grader-calls"))
    assert comment is not None
    assert printed.strip() == comment.group(1)


def test_a_python_grader_importing_a_package_scores_nothing(namespace: dict[str, Any]) -> None:
    client = namespace["client"]
    given = grader("python-grader-with-an-import")
    client.fine_tuning.alpha.graders.validate(grader=given)
    result = client.fine_tuning.alpha.graders.run(grader=given, model_sample="42", item=ANSWER)
    assert result.reward == 0
    assert result.metadata.errors.python_grader_runtime_error
    details = result.metadata.errors.python_grader_runtime_error_details or ""
    assert "ModuleNotFoundError" in details, details
    # A job with it is refused before it is queued: the pre-flight tries it on the file's rows.
    train = upload(namespace, "rft-file")
    error = refusal(
        lambda: client.fine_tuning.jobs.create(
            model="rft-tiny",
            training_file=train.id,
            method={"type": "reinforcement", "reinforcement": {"grader": given}},
        )
    )
    assert isinstance(error, openai.BadRequestError), error
    message = str(error.body["message"])  # type: ignore[index]
    assert message == (
        "reward function 'fuzzy_ratio' failed on every pre-flight sample (4 samples from the "
        "dataset): exception: ModuleNotFoundError: No module named 'rapidfuzz'"
    )
    assert message in " ".join(PAGE.read_text().replace("*", "").split())


def test_a_model_grader_is_refused_until_a_judge_is_configured(namespace: dict[str, Any]) -> None:
    client = namespace["client"]
    with pytest.raises(openai.BadRequestError) as refused:
        client.fine_tuning.alpha.graders.validate(grader=grader("score-model-grader"))
    assert refused.value.param == "grader"  # type: ignore[attr-defined]
    quoted = (
        "grader 'judge': score_model graders call a judge model, and this server has none "
        "configured (set RFT_GRADER_JUDGE_BASE_URL to an OpenAI-compatible endpoint, e.g. this "
        "server's own /v1, to opt in to their network access)"
    )
    assert refused.value.body["message"] == quoted  # type: ignore[index]
    assert " ".join(quoted.split()) in " ".join(PAGE.read_text().replace("*", "").split())


def cancelled(client: openai.OpenAI, job: Any) -> Any:
    client.fine_tuning.jobs.cancel(job.id)  # nothing here needs it to train
    return job


@pytest.mark.parametrize("grader_example", ["multi-grader", "python-grader"])
def test_the_reinforcement_job_is_created(namespace: dict[str, Any], grader_example: str) -> None:
    client = namespace["client"]
    upload(namespace, "rft-file")
    namespace["grader"] = grader(grader_example)
    run_python("rft-job", namespace)
    job = cancelled(client, namespace["job"])
    assert job.status in ("queued", "running")
    assert job.model == "rft-tiny" and job.suffix == "arithmetic" and job.seed == 42
    assert job.method.type == "reinforcement"
    assert job.method.reinforcement.grader.name == grader(grader_example)["name"]
    events = client.fine_tuning.jobs.list_events(job.id).data
    assert any("reasoning_effort='medium' has no effect" in event.message for event in events)


def test_the_supervised_job_is_created(namespace: dict[str, Any]) -> None:
    client = namespace["client"]
    upload(namespace, "sft-file")
    run_python("sft-job", namespace)
    job = cancelled(client, namespace["job"])
    assert job.status in ("queued", "running")
    assert job.method.type == "supervised"
    assert job.method.supervised.hyperparameters.n_epochs == 3


def refusal(call: Any) -> openai.APIStatusError:
    with pytest.raises(openai.APIStatusError) as refused:
        call()
    return refused.value


def test_what_the_page_says_is_refused(namespace: dict[str, Any]) -> None:
    client = namespace["client"]
    train = upload(namespace, "rft-file")
    multi = grader("multi-grader")
    page = " ".join(PAGE.read_text().split())

    def create(**overrides: Any) -> Any:
        given: dict[str, Any] = {
            "model": "rft-tiny",
            "training_file": train.id,
            "method": {"type": "reinforcement", "reinforcement": {"grader": multi}},
        }
        return lambda: client.fine_tuning.jobs.create(**{**given, **overrides})

    def reinforcement(**fields: Any) -> dict[str, Any]:
        return {"type": "reinforcement", "reinforcement": {"grader": multi, **fields}}

    cosine = {**grader("text-similarity-grader"), "evaluation_metric": "cosine"}
    cases: list[tuple[Any, str, str | None]] = [
        (create(method={"type": "dpo", "dpo": {}}), "method 'dpo' is not offered here", "method"),
        (
            create(method=reinforcement(response_format={"type": "json_object"})),
            "method.reinforcement.response_format: Extra inputs are not permitted",
            "method.reinforcement.response_format",
        ),
        (
            create(method=reinforcement(grader=cosine)),
            "evaluation_metric 'cosine' needs an embeddings model, which this server does not have",
            "grader",
        ),
        (
            lambda: client.files.create(
                file=("train.jsonl", Path("train.jsonl").read_bytes()), purpose="batch"
            ),
            "purpose 'batch' is not supported here: only 'fine-tune'",
            "purpose",
        ),
        (
            create(hyperparameters={"n_epochs": 2}),
            "top-level hyperparameters are for supervised jobs (deprecated by OpenAI): give "
            "method.reinforcement.hyperparameters",
            "hyperparameters",
        ),
        (
            create(integrations=[{"type": "comet", "comet": {}}]),
            "integration type 'comet' is not offered: only 'wandb'",
            "integrations",
        ),
    ]
    for call, message, param in cases:
        error = refusal(call)
        assert isinstance(error, openai.BadRequestError), (message, error)
        assert message in str(error.body["message"]), (message, error.body)  # type: ignore[index]
        assert error.param == param  # type: ignore[attr-defined]
        # The page quotes it (its '...' standing for what the call named).
        quoted = message.split("'comet'")[0].split("'batch'")[0]
        assert quoted in page, quoted
    # An OpenAI model name: not a hub model (400), or the hub cannot be reached to check (503).
    error = refusal(create(model="o4-mini-2025-04-16"))
    assert error.status_code in (400, 503), error
    assert "'o4-mini-2025-04-16'" in str(error.body["message"])  # type: ignore[index]
