"""Typed models of what the server sends and accepts; they mirror service/*/schemas.py.

Read models ignore fields they do not know, so an older client keeps working against a newer
server.
"""

# Every model is re-exported here: ``from rft.models import X`` is the public way in (hence
# the imports that look unused: pyproject.toml lets this file have them).
from rft.models.checkpoints import Checkpoint, CheckpointList
from rft.models.config import ConfigUpdate, DryRunResult, JobConfig, RescoredCompletion
from rft.models.cost import CostEstimate, WorkerKindEstimate
from rft.models.datasets import Dataset, DatasetDetail
from rft.models.exports import Export, ExportStatus, HubPush
from rft.models.guards import GuardName, Guards, GuardTrip
from rft.models.jobs import Hyperparameters, Job, JobMethod, JobStatus
from rft.models.page import Item, Page
from rft.models.reward_tests import (
    FunctionTestResult,
    RewardFunctionTestResult,
    Sample,
    SampleError,
)
from rft.models.rewards import (
    REWARD_MODEL_SETTINGS,
    RUN_SETTINGS,
    RewardEntryConfig,
    RewardFunction,
    RewardFunctionConfig,
    RewardFunctionLike,
    RewardFunctionMap,
    RewardFunctionsInput,
    RewardModel,
    RewardModelConfig,
    RewardModule,
    reward_functions_request,
    to_reward_function_config,
)
from rft.models.steps import (
    AsyncGenerationStep,
    Completion,
    Evaluation,
    FunctionStepMetrics,
    ImportanceSamplingRatios,
    JobEvent,
    RewardError,
    RewardFunctionLog,
    Step,
)
from rft.models.usage import Usage, UsageRow
from rft.models.webhooks import Webhook, WebhookAttempt, WebhookCreated, WebhookDelivery
