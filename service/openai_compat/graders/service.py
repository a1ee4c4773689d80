"""graders/run and graders/validate: a grader compiled to reward functions and scored by the
same code as POST /v1/reward-functions/test."""

from __future__ import annotations

from typing import Any

from service.openai_compat.graders import runtime
from service.openai_compat.graders.compile import (
    InvalidGrader,
    check_grader,
    judge_environment,
    part_reward_names,
    reward_functions,
    reward_name,
    uses_judge,
)
from service.openai_compat.graders.schemas import (
    GraderRunErrors,
    GraderRunMetadata,
    GraderRunRequest,
    GraderRunResponse,
    GraderValidateResponse,
)
from service.reward_functions.schemas import FunctionTestResult, RewardFunctionTest, Sample
from service.reward_functions.service import try_reward_functions
from service.settings import get_settings


def validate_grader(grader: Any) -> GraderValidateResponse:
    check_grader(grader, get_settings())
    return GraderValidateResponse(grader=grader)


def grader_test_request(grader: Any, samples: list[Sample]) -> RewardFunctionTest:
    """The native test request that scores ``grader`` on ``samples``."""
    settings = get_settings()
    judged = uses_judge(grader)
    return RewardFunctionTest(
        reward_functions=reward_functions(grader),
        samples=samples,
        allow_network=judged,
        secrets=judge_environment(settings) if judged else {},
    )


def run_grader(request: GraderRunRequest) -> GraderRunResponse:
    grader = request.grader
    endpoint_hosts = check_grader(grader, get_settings())
    if request.item is not None and not isinstance(request.item, dict):
        raise InvalidGrader("item must be an object (the dataset row)", param="item")
    sample = Sample(prompt="", completion=request.model_sample, example=request.item or {})
    tested = try_reward_functions(
        grader_test_request(grader, [sample]), [sample], egress_hosts=endpoint_hosts
    )
    main = tested.results[reward_name(grader.name)]
    sub_rewards = {
        part: tested.results[function].scores[0]
        for part, function in part_reward_names(grader).items()
    }
    reward = main.scores[0]
    return GraderRunResponse(
        reward=reward if reward is not None else 0.0,
        sub_rewards=sub_rewards,
        model_grader_token_usage_per_model={},
        metadata=GraderRunMetadata(
            name=grader.name,
            type=grader.type,
            errors=run_errors(grader.type, main),
            execution_time=main.duration_s,
            scores={grader.name: reward, **sub_rewards},
            token_usage=None,
            sampled_model_name=None,
        ),
    )


def run_errors(grader_type: str, result: FunctionTestResult) -> GraderRunErrors:
    if not result.errors:
        return GraderRunErrors()
    error = result.errors[0]
    details = f"{error.kind}: {error.message}"
    if "template" in error.message:
        return GraderRunErrors(sample_parse_error=True)
    if runtime.JUDGE_PARSE_ERROR in error.message:
        return GraderRunErrors(
            model_grader_parse_error=True, model_grader_server_error_details=details
        )
    if "judge" in error.message:
        return GraderRunErrors(
            model_grader_server_error=True, model_grader_server_error_details=details
        )
    if error.kind == "timeout":
        return GraderRunErrors(unresponsive_reward_error=True)
    if error.kind == "sandbox":
        return GraderRunErrors(
            python_grader_server_error=True, python_grader_server_error_type=details
        )
    return GraderRunErrors(
        python_grader_runtime_error=True, python_grader_runtime_error_details=details
    )
