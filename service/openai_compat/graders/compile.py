"""A grader becomes our reward functions: generated Python source (runtime.py, the grader as
JSON, and an entry point) that the reward sandbox runs like any user's function. So training,
graders/run and /v1/reward-functions/test score a grader with the same code, in the same
sandbox, under the same limits."""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Collection
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter

from sandbox import endpoint_runtime
from service.errors import BadRequest
from service.http_tools.service import check_endpoint, seal_header_values
from service.openai_compat.graders import runtime
from service.openai_compat.graders.schemas import (
    EndpointGrader,
    Grader,
    MultiGrader,
    PythonGrader,
)
from service.reward_functions.schemas import RewardFunctionCreate
from service.settings import Settings

ENDPOINT_IMPORT = "from sandbox.endpoint_runtime import EndpointError, post_to_endpoint\n"
# runtime.py with the endpoint calls' code in place of their import (the sandbox cannot import
# our packages; a __future__ import may only come first).
RUNTIME_SOURCE = (
    Path(runtime.__file__)
    .read_text()
    .replace(
        ENDPOINT_IMPORT,
        Path(endpoint_runtime.__file__)
        .read_text()
        .replace("from __future__ import annotations\n", ""),
    )
)
GRADER_ADAPTER: TypeAdapter[Any] = TypeAdapter(Grader)
MODEL_GRADERS = frozenset({"score_model", "label_model"})
# Metrics that need something we do not have offline: cosine compares embeddings.
UNAVAILABLE_METRICS = {
    "cosine": "needs an embeddings model, which this server does not have; use fuzzy_match, "
    "bleu, gleu, meteor or rouge_1..rouge_5, rouge_l"
}


class InvalidGrader(BadRequest):
    def __init__(self, detail: str, *, param: str = "grader") -> None:
        super().__init__(detail)
        self.param = param


def grader_dict(grader: Any) -> dict[str, Any]:
    return dict(GRADER_ADAPTER.dump_python(grader, mode="json", exclude_none=True))


def parts(grader: Any) -> dict[str, Any]:
    """A grader's single graders by name: itself, or a multi grader's named parts."""
    if isinstance(grader, MultiGrader):
        if isinstance(grader.graders, dict):
            return dict(grader.graders)
        return {grader.graders.name: grader.graders}
    return {grader.name: grader}


def with_sealed_headers(grader: Any, secrets: dict[str, str]) -> Any:
    """The grader with its endpoint graders' literal header values moved into ``secrets``
    (service.http_tools.service.seal_header_values): a job made through OpenAI's API has no
    secrets of its own for them to refer to."""

    def sealed(name: str, part: Any) -> Any:
        if not isinstance(part, EndpointGrader):
            return part
        headers = seal_header_values(part.headers, f"grader {name}", secrets)
        return part.model_copy(update={"headers": headers})

    if not isinstance(grader, MultiGrader):
        return sealed(grader.name, grader)
    if isinstance(grader.graders, dict):
        graders: Any = {name: sealed(name, part) for name, part in grader.graders.items()}
    else:
        graders = sealed(grader.graders.name, grader.graders)
    return grader.model_copy(update={"graders": graders})


def check_grader(grader: Any, settings: Settings, secrets: Collection[str] = ()) -> list[str]:
    """Refuse (400, naming the problem) a grader that could never score a sample here; the
    hosts (host:port) of its endpoint graders, which its sandbox may then reach."""
    hosts = []
    for name, part in parts(grader).items():
        where = f"grader {name!r}"
        if isinstance(part, EndpointGrader):
            try:
                hosts.append(check_endpoint(part.url, part.headers, secrets, where, settings))
            except BadRequest as error:
                raise InvalidGrader(error.detail) from None
        if part.type == "text_similarity" and part.evaluation_metric in UNAVAILABLE_METRICS:
            raise InvalidGrader(
                f"{where}: evaluation_metric {part.evaluation_metric!r} "
                f"{UNAVAILABLE_METRICS[part.evaluation_metric]}"
            )
        if part.type in MODEL_GRADERS and not settings.grader_judge_base_url:
            raise InvalidGrader(
                f"{where}: {part.type} graders call a judge model, and this server has none "
                "configured (set RFT_GRADER_JUDGE_BASE_URL to an OpenAI-compatible endpoint, "
                "e.g. this server's own /v1, to opt in to their network access)"
            )
        if part.type == "label_model" and not set(part.passing_labels) <= set(part.labels):
            raise InvalidGrader(f"{where}: passing_labels must be a subset of labels")
        if isinstance(part, PythonGrader):
            check_python_source(where, part.source)
    if isinstance(grader, MultiGrader):
        try:
            runtime.parse_formula(grader.calculate_output, set(parts(grader)))
        except runtime.GraderError as error:
            raise InvalidGrader(str(error), param="grader.calculate_output") from None
    return sorted(set(hosts))


def check_python_source(where: str, source: str) -> None:
    try:
        tree = ast.parse(source)
    except SyntaxError as error:
        raise InvalidGrader(f"{where}: syntax error on line {error.lineno}: {error.msg}") from None
    graders = [
        node
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and node.name == "grade" and len(node.args.args) >= 2
    ]
    if not graders:
        raise InvalidGrader(f"{where}: the source must define grade(sample, item) -> float")


def reward_name(grader_name: str) -> str:
    """An identifier (our reward functions' names are) from a grader's free-form name."""
    name = re.sub(r"\W", "_", grader_name, flags=re.ASCII).strip("_")[:64] or "grader"
    return name if not name[0].isdigit() else f"g_{name}"[:64]


GRADER_LINE = re.compile(r"^GRADER = json\.loads\((.*)\)$", re.MULTILINE)


def reward_source(function_name: str, grader: dict[str, Any]) -> str:
    if not _calls_endpoint(grader):
        return (
            f"{RUNTIME_SOURCE}\n\n"
            f"GRADER = json.loads({json.dumps(json.dumps(grader))})\n\n\n"
            f"def {function_name}(prompt, completion, example):\n"
            f"    return grade_completion(GRADER, completion, example)\n"
        )
    # An endpoint grader is sent the rollout's conversation too.
    return (
        f"{RUNTIME_SOURCE}\n\n"
        f"GRADER = json.loads({json.dumps(json.dumps(grader))})\n\n\n"
        f"def {function_name}(prompt, completion, example, messages):\n"
        f"    return grade_completion(GRADER, completion, example, messages)\n"
    )


def _calls_endpoint(grader: dict[str, Any]) -> bool:
    if grader.get("type") == "multi":
        return any(_calls_endpoint(part) for part in runtime.sub_graders(grader).values())
    return grader.get("type") == "endpoint"


def grader_in_source(source: str) -> dict[str, Any] | None:
    """The grader a reward_source was generated from; None for any other source."""
    match = GRADER_LINE.search(source)
    if match is None:
        return None
    try:
        grader = json.loads(json.loads(match.group(1)))
    except ValueError:
        return None
    return grader if isinstance(grader, dict) else None


def reward_functions(grader: Any) -> dict[str, RewardFunctionCreate]:
    """The grader as reward functions: the grader itself (weight 1, the reward), and for a
    multi grader each of its parts at weight 0, so every part's score is recorded per step
    without changing the reward."""
    main = reward_name(grader.name)
    functions = {main: RewardFunctionCreate(source=reward_source(main, grader_dict(grader)))}
    if isinstance(grader, MultiGrader):
        for part_name, part in parts(grader).items():
            name = reward_name(f"{main}__{part_name}")
            functions[name] = RewardFunctionCreate(
                source=reward_source(name, grader_dict(part)), weight=0.0
            )
    return functions


def part_reward_names(grader: Any) -> dict[str, str]:
    """A multi grader's part names -> the reward function scoring each part."""
    if not isinstance(grader, MultiGrader):
        return {}
    main = reward_name(grader.name)
    return {part: reward_name(f"{main}__{part}") for part in parts(grader)}


def uses_judge(grader: Any) -> bool:
    return any(part.type in MODEL_GRADERS for part in parts(grader).values())


def judge_environment(settings: Settings) -> dict[str, str]:
    environment = {}
    if settings.grader_judge_base_url:
        environment[runtime.JUDGE_URL_VARIABLE] = settings.grader_judge_base_url
    if settings.grader_judge_api_key is not None:
        environment[runtime.JUDGE_KEY_VARIABLE] = settings.grader_judge_api_key.get_secret_value()
    return environment
