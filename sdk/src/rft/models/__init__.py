"""Typed models of what the server sends and accepts; they mirror service/*/schemas.py.

Read models ignore fields they do not know, so an older client keeps working against a newer
server.
"""

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

__all__ = [
    "REWARD_MODEL_SETTINGS",
    "RUN_SETTINGS",
    "AsyncGenerationStep",
    "Checkpoint",
    "CheckpointList",
    "Completion",
    "ConfigUpdate",
    "CostEstimate",
    "Dataset",
    "DatasetDetail",
    "DryRunResult",
    "Evaluation",
    "Export",
    "ExportStatus",
    "FunctionStepMetrics",
    "FunctionTestResult",
    "GuardName",
    "GuardTrip",
    "Guards",
    "HubPush",
    "Hyperparameters",
    "ImportanceSamplingRatios",
    "Item",
    "Job",
    "JobConfig",
    "JobEvent",
    "JobMethod",
    "JobStatus",
    "Page",
    "RescoredCompletion",
    "RewardEntryConfig",
    "RewardError",
    "RewardFunction",
    "RewardFunctionConfig",
    "RewardFunctionLike",
    "RewardFunctionLog",
    "RewardFunctionMap",
    "RewardFunctionTestResult",
    "RewardFunctionsInput",
    "RewardModel",
    "RewardModelConfig",
    "RewardModule",
    "Sample",
    "SampleError",
    "Step",
    "Usage",
    "UsageRow",
    "Webhook",
    "WebhookAttempt",
    "WebhookCreated",
    "WebhookDelivery",
    "WorkerKindEstimate",
    "reward_functions_request",
    "to_reward_function_config",
]
