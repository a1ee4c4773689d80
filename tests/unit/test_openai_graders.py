"""OpenAI-style graders scored by runtime.py (pure), and refused by compile.py's checks."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import TypeAdapter

from service.openai_compat.graders import runtime
from service.openai_compat.graders.compile import (
    InvalidGrader,
    check_grader,
    reward_functions,
    reward_source,
)
from service.openai_compat.graders.schemas import Grader
from service.settings import Settings

GRADER: TypeAdapter[Any] = TypeAdapter(Grader)


def namespaces(output_text: str, **item: Any) -> dict[str, Any]:
    return {"sample": runtime.sample_namespace(output_text), "item": item}


@pytest.mark.parametrize(
    ("operation", "output", "expected"),
    [
        ("eq", "Paris", 1.0),
        ("eq", "paris", 0.0),
        ("ne", "paris", 1.0),
        ("like", "It is Paris.", 1.0),
        ("like", "It is paris.", 0.0),
        ("ilike", "It is paris.", 1.0),
    ],
)
def test_string_check(operation: str, output: str, expected: float) -> None:
    grader = {
        "type": "string_check",
        "name": "s",
        "input": "{{ sample.output_text }}",
        "reference": "{{item.answer}}",
        "operation": operation,
    }
    assert runtime.grade(grader, namespaces(output, answer="Paris")) == expected


def test_templates_reach_output_json_and_nested_items() -> None:
    ns = namespaces(json.dumps({"x": {"y": 3}}), ref={"list": [1, "two"]})
    assert runtime.render("{{sample.output_json.x.y}}-{{item.ref.list.1}}", ns) == "3-two"
    with pytest.raises(runtime.GraderError, match="'missing' not found"):
        runtime.render("{{item.missing}}", ns)


def test_text_metrics() -> None:
    same = "the cat sat on the mat"
    for metric, function in runtime.TEXT_METRICS.items():
        assert function(same, same) == pytest.approx(1.0, abs=0.05), metric
        assert function("completely different words", same) == pytest.approx(0.0, abs=0.2), metric
    assert runtime.rouge_n("the cat sat", "the cat sat on the mat", 1) == pytest.approx(2 / 3)
    assert runtime.rouge_l("a b c d", "a c d") == pytest.approx(2 * 0.75 * 1 / 1.75)
    assert 0.0 < runtime.bleu("the cat sat on a mat", same) < 1.0
    assert runtime.fuzzy_match("abcd", "abce") == pytest.approx(0.75)


def test_python_grader_gets_sample_and_item() -> None:
    grader = {
        "type": "python",
        "name": "p",
        "source": "def grade(sample, item):\n"
        "    return float(sample['output_text'].strip() == item['answer'])\n",
    }
    assert runtime.grade(grader, namespaces(" 4 ", answer="4")) == 1.0
    assert runtime.grade(grader, namespaces("5", answer="4")) == 0.0
    bad = {**grader, "source": "def grade(sample, item):\n    return 'yes'\n"}
    with pytest.raises(runtime.GraderError, match="not a number"):
        runtime.grade(bad, namespaces("5"))


def multi(formula: str) -> dict[str, Any]:
    return {
        "type": "multi",
        "name": "m",
        "calculate_output": formula,
        "graders": {
            "exact": {
                "type": "string_check",
                "name": "exact",
                "input": "{{sample.output_text}}",
                "reference": "{{item.answer}}",
                "operation": "eq",
            },
            "close": {
                "type": "text_similarity",
                "name": "close",
                "input": "{{sample.output_text}}",
                "reference": "{{item.answer}}",
                "evaluation_metric": "fuzzy_match",
            },
        },
    }


def test_multi_formula() -> None:
    scores: dict[str, float] = {}
    ns = namespaces("abce", answer="abcd")
    assert runtime.grade(multi("0.5 * exact + 0.5 * close"), ns, scores=scores) == 0.375
    assert scores == {"exact": 0.0, "close": 0.75}
    assert runtime.grade(multi("max(exact, close) ^ 2"), ns) == pytest.approx(0.5625)
    assert runtime.grade(multi("-floor(close) + sqrt(4) - abs(-1)"), ns) == 1.0


@pytest.mark.parametrize(
    ("formula", "message"),
    [
        ("exact + nope", "'nope'"),
        ("__import__('os')", "may call only"),
        ("exact.real", "Attribute is not allowed"),
        ("exact if close else 1", "IfExp is not allowed"),
        ("'a'", "must be numbers"),
        ("exact +", "does not parse"),
        ("[exact][0]", "not allowed"),
    ],
)
def test_unsafe_or_wrong_formulas_are_refused(formula: str, message: str) -> None:
    with pytest.raises(runtime.GraderError, match=message):
        runtime.parse_formula(formula, {"exact", "close"})


def judge(reply: str) -> runtime.Post:
    def post(body: dict[str, Any]) -> dict[str, Any]:
        post.bodies.append(body)  # type: ignore[attr-defined]
        return {"choices": [{"message": {"role": "assistant", "content": reply}}]}

    post.bodies = []  # type: ignore[attr-defined]
    return post


def test_model_graders_read_the_judges_answer() -> None:
    score = {
        "type": "score_model",
        "name": "judge",
        "model": "rft-tiny",
        "range": [0, 10],
        "input": [{"role": "user", "content": "Rate {{sample.output_text}} for {{item.q}}"}],
        "sampling_params": {"temperature": 0.0, "max_completions_tokens": 5},
    }
    post = judge('{"result": 7, "steps": []}')
    assert runtime.grade(score, namespaces("hi", q="Q"), post=post) == 7.0
    assert post.bodies[0]["messages"] == [{"role": "user", "content": "Rate hi for Q"}]  # type: ignore[attr-defined]
    assert post.bodies[0]["max_tokens"] == 5  # type: ignore[attr-defined]
    assert runtime.grade(score, namespaces("hi", q="Q"), post=judge("I say 42")) == 10.0
    label = {
        "type": "label_model",
        "name": "l",
        "model": "m",
        "labels": ["good", "bad"],
        "passing_labels": ["good"],
        "input": [{"role": "user", "content": "{{sample.output_text}}"}],
    }
    assert runtime.grade(label, namespaces("x"), post=judge("Good")) == 1.0
    assert runtime.grade(label, namespaces("x"), post=judge('{"result": "bad"}')) == 0.0
    with pytest.raises(runtime.GraderError, match="without one of the labels"):
        runtime.grade(label, namespaces("x"), post=judge("meh"))


def test_checks_refuse_what_cannot_run_here() -> None:
    settings = Settings()
    cosine = GRADER.validate_python(
        {
            "type": "text_similarity",
            "name": "c",
            "input": "a",
            "reference": "b",
            "evaluation_metric": "cosine",
        }
    )
    with pytest.raises(InvalidGrader, match="embeddings"):
        check_grader(cosine, settings)
    judged = GRADER.validate_python(
        {
            "type": "score_model",
            "name": "j",
            "model": "m",
            "input": [{"role": "user", "content": "x"}],
        }
    )
    with pytest.raises(InvalidGrader, match="RFT_GRADER_JUDGE_BASE_URL"):
        check_grader(judged, settings)
    check_grader(judged, settings.model_copy(update={"grader_judge_base_url": "http://x/v1"}))
    no_grade = GRADER.validate_python({"type": "python", "name": "p", "source": "x = 1"})
    with pytest.raises(InvalidGrader, match="grade\\(sample, item\\)"):
        check_grader(no_grade, settings)
    with pytest.raises(InvalidGrader, match="'nope'"):
        check_grader(GRADER.validate_python(multi("nope")), settings)


def test_compiled_source_scores_like_the_runtime() -> None:
    grader = GRADER.validate_python(multi("(exact + close) / 2"))
    functions = reward_functions(grader)
    assert {name: f.weight for name, f in functions.items()} == {
        "m": 1.0,
        "m__exact": 0.0,
        "m__close": 0.0,
    }
    scope: dict[str, Any] = {}
    exec(compile(functions["m"].source, "<m>", "exec"), scope)
    assert scope["m"]("", "abce", {"prompt": "", "answer": "abcd"}) == 0.375
    assert (
        reward_source("x", {"type": "python"})
        .rstrip()
        .endswith("return grade_completion(GRADER, completion, example)")
    )


def test_a_grader_without_a_name_is_named_by_its_type() -> None:
    # OpenAI requires names; code in the wild leaves them out of python graders.
    grader = GRADER.validate_python(
        {"type": "python", "source": "def grade(s, i):\n    return 1\n"}
    )
    assert grader.name == "python"
    assert list(reward_functions(grader)) == ["python"]


def test_model_graders_call_the_configured_judge_over_http(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The judge edge for real (urllib, headers, body), against a local stand-in judge."""
    import http.server
    import threading

    received: list[tuple[str, str, dict[str, Any]]] = []

    class Judge(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            received.append((self.path, self.headers["Authorization"], body))
            reply = {"choices": [{"message": {"role": "assistant", "content": '{"result": 0.6}'}}]}
            payload = json.dumps(reply).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Judge)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv(runtime.JUDGE_URL_VARIABLE, f"http://127.0.0.1:{server.server_port}/v1")
        monkeypatch.setenv(runtime.JUDGE_KEY_VARIABLE, "rft_judge_key")
        grader = {
            "type": "score_model",
            "name": "judge",
            "model": "rft-tiny",
            "input": [{"role": "user", "content": "Grade: {{sample.output_text}}"}],
        }
        assert runtime.grade_completion(grader, "an answer", {"prompt": "p"}) == 0.6
    finally:
        server.shutdown()
        server.server_close()
    path, authorization, body = received[0]
    assert path == "/v1/chat/completions"
    assert authorization == "Bearer rft_judge_key"
    assert body["model"] == "rft-tiny"
    assert body["messages"] == [{"role": "user", "content": "Grade: an answer"}]

    monkeypatch.setenv(runtime.JUDGE_URL_VARIABLE, f"http://127.0.0.1:{server.server_port}/v1")
    with pytest.raises(runtime.GraderError, match="judge model call failed"):
        runtime.grade_completion(grader, "x", {})  # the judge is gone: connection refused
