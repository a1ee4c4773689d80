from __future__ import annotations

from typing import Literal

from pydantic import Field

from rft import models

NO_MEASUREMENT = "no measurement yet for this model on these workers"

EstimateBasis = Literal["measured", "none"]
UsageGrouping = Literal["day", "job"]


# The SDK's (docs/architecture.md, "Wire types"); the server names the bases it knows.
class WorkerKindEstimate(models.WorkerKindEstimate):
    __doc__ = models.WorkerKindEstimate.__doc__  # the API document's description of it
    basis: EstimateBasis = Field(
        description=models.WorkerKindEstimate.model_fields["basis"].description
    )


class CostEstimate(models.CostEstimate):
    __doc__ = models.CostEstimate.__doc__
    workers: list[WorkerKindEstimate] = Field(  # type: ignore[assignment]
        description=models.CostEstimate.model_fields["workers"].description
    )


class Usage(models.Usage):
    __doc__ = models.Usage.__doc__  # the API document's description of it
    group_by: UsageGrouping = Field(description="'day' or 'job': what each of rows is.")
