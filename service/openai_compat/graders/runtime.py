"""How OpenAI-style graders score one sample. Standard library only, on purpose: this file's
source is copied verbatim into the reward function a grader becomes (see compile.py) and runs
in the reward sandbox, where the service's packages are not importable.

A grader is the JSON dict the client sent (already validated by schemas.py). ``grade`` returns
the grader's float score, or raises GraderError (a wrong template, a failed judge call), which
the sandbox records as that sample's reward error.
"""

from __future__ import annotations

import ast
import difflib
import functools
import json
import math
import os
import re
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable
from typing import Any

# compile.py puts sandbox/endpoint_runtime.py's source in place of this line (the reward
# sandbox cannot import our packages).
from sandbox.endpoint_runtime import EndpointError, post_to_endpoint


class GraderError(Exception):
    pass


# --- templates ---------------------------------------------------------------------------

TEMPLATE = re.compile(r"\{\{\s*([A-Za-z_][\w]*(?:\.[\w]+)*)\s*\}\}")


def sample_namespace(output_text: str) -> dict[str, Any]:
    """The ``sample`` namespace of OpenAI's graders for a plain text completion."""
    try:
        output_json = json.loads(output_text)
    except ValueError:
        output_json = None
    return {
        "output_text": output_text,
        "output_json": output_json,
        "output_tools": [],
        "choices": [{"index": 0, "message": {"role": "assistant", "content": output_text}}],
    }


def lookup(path: str, namespaces: dict[str, Any]) -> Any:
    head, *rest = path.split(".")
    if head not in namespaces:
        raise GraderError(f"template {{{{{path}}}}}: unknown namespace {head!r} (item or sample)")
    value = namespaces[head]
    for part in rest:
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            raise GraderError(f"template {{{{{path}}}}}: {part!r} not found")
    return value


def render(template: str, namespaces: dict[str, Any]) -> str:
    def substitute(match: re.Match[str]) -> str:
        value = lookup(match.group(1), namespaces)
        return value if isinstance(value, str) else json.dumps(value)

    return TEMPLATE.sub(substitute, template)


# --- text similarity ---------------------------------------------------------------------

WORD = re.compile(r"\w+", re.UNICODE)


def words(text: str) -> list[str]:
    return WORD.findall(text.lower())


def ngrams(tokens: list[str], n: int) -> Counter[tuple[str, ...]]:
    return Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))


def f1(overlap: float, candidate_total: float, reference_total: float) -> float:
    if overlap == 0 or candidate_total == 0 or reference_total == 0:
        return 0.0
    precision, recall = overlap / candidate_total, overlap / reference_total
    return 2 * precision * recall / (precision + recall)


def rouge_n(candidate: str, reference: str, n: int) -> float:
    c, r = ngrams(words(candidate), n), ngrams(words(reference), n)
    return f1(sum((c & r).values()), sum(c.values()), sum(r.values()))


def rouge_l(candidate: str, reference: str) -> float:
    c, r = words(candidate), words(reference)
    previous = [0] * (len(r) + 1)
    for token in c:
        current = [0]
        for j, other in enumerate(r):
            current.append(previous[j] + 1 if token == other else max(previous[j + 1], current[j]))
        previous = current
    return f1(previous[-1], len(c), len(r))


def bleu(candidate: str, reference: str, max_n: int = 4) -> float:
    """Sentence BLEU with add-one smoothing of the higher orders (Lin and Och's method 1)."""
    c, r = words(candidate), words(reference)
    if not c or not r:
        return 0.0
    log_precision = 0.0
    for n in range(1, max_n + 1):
        cn, rn = ngrams(c, n), ngrams(r, n)
        matched, total = sum((cn & rn).values()), max(1, sum(cn.values()))
        if n == 1 and matched == 0:
            return 0.0
        if n > 1:
            matched, total = matched + 1, total + 1
        log_precision += math.log(matched / total) / max_n
    brevity = 1.0 if len(c) > len(r) else math.exp(1 - len(r) / len(c))
    return brevity * math.exp(log_precision)


def gleu(candidate: str, reference: str, max_n: int = 4) -> float:
    """Google-BLEU: min(precision, recall) over all 1..4-grams together."""
    c, r = words(candidate), words(reference)
    matched = candidate_total = reference_total = 0
    for n in range(1, max_n + 1):
        cn, rn = ngrams(c, n), ngrams(r, n)
        matched += sum((cn & rn).values())
        candidate_total += sum(cn.values())
        reference_total += sum(rn.values())
    if not candidate_total or not reference_total:
        return 0.0
    return min(matched / candidate_total, matched / reference_total)


def meteor(candidate: str, reference: str) -> float:
    """METEOR with exact word matches (no stemming or synonyms: those need WordNet)."""
    c, r = words(candidate), words(reference)
    matches = sum((Counter(c) & Counter(r)).values())
    if not matches:
        return 0.0
    precision, recall = matches / len(c), matches / len(r)
    f_mean = 10 * precision * recall / (recall + 9 * precision)
    # Chunks: runs of candidate words that match the reference in the same order.
    matcher = difflib.SequenceMatcher(a=c, b=r, autojunk=False)
    chunks = sum(1 for block in matcher.get_matching_blocks() if block.size)
    aligned = sum(block.size for block in matcher.get_matching_blocks())
    penalty = 0.5 * (chunks / aligned) ** 3 if aligned else 0.5
    return f_mean * (1 - penalty)


def fuzzy_match(candidate: str, reference: str) -> float:
    return difflib.SequenceMatcher(a=candidate, b=reference, autojunk=False).ratio()


TEXT_METRICS: dict[str, Callable[[str, str], float]] = {
    "fuzzy_match": fuzzy_match,
    "bleu": bleu,
    "gleu": gleu,
    "meteor": meteor,
    **{f"rouge_{n}": functools.partial(rouge_n, n=n) for n in range(1, 6)},
    "rouge_l": rouge_l,
}


# --- multi: calculate_output -------------------------------------------------------------

FORMULA_FUNCTIONS: dict[str, Callable[..., float]] = {
    "min": min,
    "max": max,
    "abs": abs,
    "floor": math.floor,
    "ceil": math.ceil,
    "exp": math.exp,
    "sqrt": math.sqrt,
    "log": math.log,
}
BINARY_OPERATORS: dict[type[ast.operator], Callable[[float, float], float]] = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
    ast.Pow: lambda a, b: a**b,
    ast.BitXor: lambda a, b: a**b,  # OpenAI's formulas write powers as ^
    ast.Mod: lambda a, b: a % b,
    ast.FloorDiv: lambda a, b: a // b,
}


def parse_formula(formula: str, names: set[str]) -> ast.expr:
    """The formula's syntax tree, refused (GraderError) unless it is arithmetic over ``names``,
    numbers and FORMULA_FUNCTIONS. No eval: evaluate_formula walks this tree itself."""
    try:
        tree = ast.parse(formula.replace("**", "^"), mode="eval").body
    except SyntaxError as error:
        raise GraderError(f"calculate_output does not parse: {error.msg}") from None
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            if node.id not in names and node.id not in FORMULA_FUNCTIONS:
                raise GraderError(
                    f"calculate_output names {node.id!r}, which is not one of the graders "
                    f"({', '.join(sorted(names))})"
                )
        elif isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in FORMULA_FUNCTIONS:
                raise GraderError(
                    "calculate_output may call only " + ", ".join(sorted(FORMULA_FUNCTIONS))
                )
            if node.keywords:
                raise GraderError("calculate_output: functions take no keyword arguments")
        elif isinstance(node, ast.BinOp):
            if type(node.op) not in BINARY_OPERATORS:
                raise GraderError("calculate_output: operators are + - * / ^ % //")
        elif isinstance(node, ast.UnaryOp):
            if not isinstance(node.op, ast.UAdd | ast.USub):
                raise GraderError("calculate_output: unary operators are + and -")
        elif isinstance(node, ast.Constant):
            if isinstance(node.value, bool) or not isinstance(node.value, int | float):
                raise GraderError("calculate_output: constants must be numbers")
        elif not isinstance(node, ast.Load | ast.operator | ast.unaryop):
            raise GraderError(f"calculate_output: {type(node).__name__} is not allowed")
    return tree


def evaluate_formula(node: ast.expr, values: dict[str, float]) -> float:
    if isinstance(node, ast.Constant):
        assert isinstance(node.value, int | float)  # parse_formula let only numbers through
        return float(node.value)
    if isinstance(node, ast.Name):
        return float(values[node.id])
    if isinstance(node, ast.UnaryOp):
        operand = evaluate_formula(node.operand, values)
        return -operand if isinstance(node.op, ast.USub) else operand
    if isinstance(node, ast.BinOp):
        left, right = evaluate_formula(node.left, values), evaluate_formula(node.right, values)
        return float(BINARY_OPERATORS[type(node.op)](left, right))
    if isinstance(node, ast.Call):
        assert isinstance(node.func, ast.Name)
        arguments = [evaluate_formula(argument, values) for argument in node.args]
        return float(FORMULA_FUNCTIONS[node.func.id](*arguments))
    raise GraderError(f"calculate_output: {type(node).__name__} is not allowed")


def sub_graders(grader: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A multi grader's graders by the name its formula uses: the key in OpenAI's documented
    object form, the grader's own name in the single-grader form of the typed client."""
    graders = grader["graders"]
    if isinstance(graders, dict) and "type" not in graders:
        return dict(graders)
    return {graders["name"]: graders}


# --- model judges ------------------------------------------------------------------------

JUDGE_URL_VARIABLE = "RFT_GRADER_JUDGE_BASE_URL"
JUDGE_KEY_VARIABLE = "RFT_GRADER_JUDGE_API_KEY"
JUDGE_TIMEOUT_S = 20.0
JUDGE_PARSE_ERROR = "judge answered without"  # begins every unreadable-reply error


def post_chat_completion(body: dict[str, Any]) -> dict[str, Any]:
    """The outside edge of model graders: one chat completion from the configured judge."""
    base_url = os.environ.get(JUDGE_URL_VARIABLE)
    if not base_url:
        raise GraderError(f"no judge endpoint configured ({JUDGE_URL_VARIABLE})")
    request = urllib.request.Request(
        base_url.rstrip("/") + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={
            "Content-Type": "application/json",
            "Authorization": f"Bearer {os.environ.get(JUDGE_KEY_VARIABLE, '')}",
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=JUDGE_TIMEOUT_S) as response:
            return dict(json.loads(response.read()))
    except (urllib.error.URLError, OSError, ValueError) as error:
        raise GraderError(f"judge model call failed: {error}") from None


def judge_messages(grader: dict[str, Any], namespaces: dict[str, Any]) -> list[dict[str, str]]:
    messages = []
    for message in grader["input"]:
        content = message["content"]
        if isinstance(content, dict):
            content = content.get("text", "")
        elif isinstance(content, list):
            content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
        messages.append({"role": message["role"], "content": render(str(content), namespaces)})
    return messages


def judge_reply(grader: dict[str, Any], namespaces: dict[str, Any], post: Post) -> str:
    body: dict[str, Any] = {
        "model": grader["model"],
        "messages": judge_messages(grader, namespaces),
    }
    params = grader.get("sampling_params") or {}
    for ours, theirs in (
        ("temperature", "temperature"),
        ("top_p", "top_p"),
        ("seed", "seed"),
        ("max_tokens", "max_completions_tokens"),
    ):
        if params.get(theirs) is not None:
            body[ours] = params[theirs]
    reply = post(body)
    try:
        return str(reply["choices"][0]["message"]["content"] or "")
    except (KeyError, IndexError, TypeError):
        raise GraderError("judge model reply has no choices[0].message.content") from None


def reply_result(reply: str) -> Any:
    """The judge's answer: ``result`` of a JSON object when it sent one, else its text."""
    text = reply.strip()
    match = re.search(r"\{.*\}", text, re.DOTALL)
    if match:
        try:
            parsed = json.loads(match.group(0))
        except ValueError:
            parsed = None
        if isinstance(parsed, dict) and "result" in parsed:
            return parsed["result"]
    return text


def score_model(grader: dict[str, Any], namespaces: dict[str, Any], post: Post) -> float:
    result = reply_result(judge_reply(grader, namespaces, post))
    if not isinstance(result, int | float):
        number = re.search(r"-?\d+(?:\.\d+)?", str(result))
        if number is None:
            raise GraderError(f"{JUDGE_PARSE_ERROR} a score: {str(result)[:200]!r}")
        result = float(number.group(0))
    low, high = grader.get("range") or [0.0, 1.0]
    return float(min(max(float(result), low), high))


def label_model(grader: dict[str, Any], namespaces: dict[str, Any], post: Post) -> float:
    result = str(reply_result(judge_reply(grader, namespaces, post))).strip().strip('"')
    labels = {label.lower(): label for label in grader["labels"]}
    label = labels.get(result.lower())
    if label is None:
        raise GraderError(f"{JUDGE_PARSE_ERROR} one of the labels: {result[:200]!r}")
    return 1.0 if label in grader["passing_labels"] else 0.0


# --- endpoint graders --------------------------------------------------------------------


def endpoint_score(grader: dict[str, Any], namespaces: dict[str, Any]) -> float:
    """POST the rollout (the sample, its conversation, the dataset row's reference fields)
    to the user's endpoint; its ``{"score": number}`` is the score."""
    body = {
        "sample": namespaces["sample"],
        "item": namespaces["item"],
        "messages": namespaces.get("messages") or [],
    }
    try:
        answer = post_to_endpoint(
            grader["url"],
            body,
            headers=grader.get("headers") or {},
            timeout_s=float(grader.get("timeout_s", 10.0)),
            max_retries=int(grader.get("max_retries", 2)),
            backoff_s=0.5,
        )
    except EndpointError as error:
        raise GraderError(f"endpoint grader {error.kind}: {error}") from None
    score = answer.get("score") if isinstance(answer, dict) else None
    if isinstance(score, bool) or not isinstance(score, int | float) or not math.isfinite(score):
        raise GraderError(
            f'endpoint grader malformed_response: {grader["url"]} answered no {{"score": '
            f"number}}: {json.dumps(answer)[:200]}"
        )
    return float(score)


# --- graders -----------------------------------------------------------------------------

Post = Callable[[dict[str, Any]], dict[str, Any]]


def run_python_grader(grader: dict[str, Any], namespaces: dict[str, Any]) -> float:
    # Already inside the reward sandbox: the grader's source gets a namespace of its own.
    scope: dict[str, Any] = {"__name__": f"grader_{grader['name']}"}
    exec(compile(grader["source"], f"<grader {grader['name']}>", "exec"), scope)
    grade_function = scope.get("grade")
    if not callable(grade_function):
        raise GraderError("the python grader's source defines no grade(sample, item)")
    score = grade_function(namespaces["sample"], namespaces["item"])
    if isinstance(score, bool) or not isinstance(score, int | float):
        raise GraderError(f"grade() returned {type(score).__name__}, not a number")
    return float(score)


def grade(
    grader: dict[str, Any],
    namespaces: dict[str, Any],
    post: Post = post_chat_completion,
    scores: dict[str, float] | None = None,
) -> float:
    """The grader's score for one sample. ``scores`` collects every named grader's score (a
    multi grader's parts included), for graders/run's sub_rewards."""
    kind = grader["type"]
    if kind == "string_check":
        given = render(grader["input"], namespaces)
        reference = render(grader["reference"], namespaces)
        operation = grader["operation"]
        if operation == "eq":
            score = float(given == reference)
        elif operation == "ne":
            score = float(given != reference)
        elif operation == "like":
            score = float(reference in given)
        else:
            score = float(reference.lower() in given.lower())
    elif kind == "text_similarity":
        metric = TEXT_METRICS.get(grader["evaluation_metric"])
        if metric is None:
            raise GraderError(f"evaluation_metric {grader['evaluation_metric']!r} is unavailable")
        score = metric(render(grader["input"], namespaces), render(grader["reference"], namespaces))
    elif kind == "python":
        score = run_python_grader(grader, namespaces)
    elif kind == "score_model":
        score = score_model(grader, namespaces, post)
    elif kind == "label_model":
        score = label_model(grader, namespaces, post)
    elif kind == "endpoint":
        score = endpoint_score(grader, namespaces)
    elif kind == "multi":
        parts = sub_graders(grader)
        values = {name: grade(part, namespaces, post, scores) for name, part in parts.items()}
        if scores is not None:
            scores.update(values)
        formula = parse_formula(grader["calculate_output"], set(parts))
        try:
            score = evaluate_formula(formula, values)
        except (ArithmeticError, ValueError) as error:
            raise GraderError(f"calculate_output failed: {error}") from None
    else:
        raise GraderError(f"unknown grader type {kind!r}")
    return score


def grade_completion(
    grader: dict[str, Any],
    completion: Any,
    example: dict[str, Any],
    messages: list[dict[str, Any]] | None = None,
) -> float:
    """The reward-function form: our (completion, example) as OpenAI's (sample, item);
    ``messages``, the rollout's conversation (tool calls and results of an agent job), for
    endpoint graders."""
    if isinstance(completion, list):  # a conversational completion: its last message's text
        completion = completion[-1].get("content", "") if completion else ""
    item = {key: value for key, value in example.items() if key != "prompt"}
    namespaces: dict[str, Any] = {"sample": sample_namespace(str(completion)), "item": item}
    if messages is not None:
        namespaces["messages"] = messages
    return grade(grader, namespaces)
