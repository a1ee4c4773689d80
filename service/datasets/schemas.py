from __future__ import annotations

from pydantic import ConfigDict

from rft import models


# The SDK's models (docs/architecture.md, "Wire types"), read from the dataset's row.
class Dataset(models.Dataset):
    model_config = ConfigDict(from_attributes=True)


class DatasetDetail(models.DatasetDetail):
    model_config = ConfigDict(from_attributes=True)
