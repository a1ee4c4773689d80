from __future__ import annotations

from fastapi import APIRouter

from service.auth.dependencies import CurrentTenant
from service.db import SessionDep, end_transaction
from service.errors import error_responses
from service.reward_functions import service
from service.reward_functions.schemas import RewardFunctionTest, RewardFunctionTestResult

router = APIRouter(prefix="/v1/reward-functions", tags=["reward functions"])


@router.post("/test", response_model=RewardFunctionTestResult, responses=error_responses(404))
def test_reward_functions(
    session: SessionDep, tenant_id: CurrentTenant, request: RewardFunctionTest
) -> RewardFunctionTestResult:
    """Run functions on samples in the sandbox: scores, typed errors, print output, timing.

    `runtime_packages` are installed first, as for a job (the first request with a list waits
    for pip; later ones reuse it)."""
    samples = service.samples_to_score(session, tenant_id, request)
    # The reads are done: hand the database connection back while pip and the sandbox run.
    end_transaction(session)
    return service.try_reward_functions(request, samples)
