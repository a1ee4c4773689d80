from __future__ import annotations

from typing import Any

from rft.dataset_payload import DatasetSource, dataset_file
from rft.models import Dataset, DatasetDetail, Page
from rft.pagination import AsyncPageIterator, PageIterator, get_api_list, get_async_api_list
from rft.transport import AsyncTransport, RequestOptions, SyncTransport


def _upload_request(source: Any, name: str | None, file_format: str | None) -> RequestOptions:
    filename, content = dataset_file(source, name=name)
    form = {key: value for key, value in (("name", name), ("format", file_format)) if value}
    return RequestOptions("POST", "/v1/datasets", files={"file": (filename, content)}, data=form)


class Datasets:
    def __init__(self, transport: SyncTransport) -> None:
        self._transport = transport

    def upload(
        self, source: DatasetSource, /, *, name: str | None = None, format: str | None = None
    ) -> Dataset:
        """Upload a JSONL/CSV/Parquet file, a list of dicts, a DataFrame or a datasets.Dataset.

        Rows given in memory are sent as JSONL; ``format`` overrides the server's guess from
        the file name.
        """
        response = self._transport.request(_upload_request(source, name, format))
        return Dataset.model_validate(response.json())

    def get(self, dataset_id: str, /) -> DatasetDetail:
        response = self._transport.request(RequestOptions("GET", f"/v1/datasets/{dataset_id}"))
        return DatasetDetail.model_validate(response.json())

    def list(self, *, limit: int | None = None) -> PageIterator[Dataset]:
        """Every dataset, newest first; ``limit`` is the page size."""
        return get_api_list(
            self._transport, "/v1/datasets", page=Page[Dataset], params={"limit": limit}
        )


class AsyncDatasets:
    def __init__(self, transport: AsyncTransport) -> None:
        self._transport = transport

    async def upload(
        self, source: DatasetSource, /, *, name: str | None = None, format: str | None = None
    ) -> Dataset:
        response = await self._transport.request(_upload_request(source, name, format))
        return Dataset.model_validate(response.json())

    async def get(self, dataset_id: str, /) -> DatasetDetail:
        options = RequestOptions("GET", f"/v1/datasets/{dataset_id}")
        return DatasetDetail.model_validate((await self._transport.request(options)).json())

    def list(self, *, limit: int | None = None) -> AsyncPageIterator[Dataset]:
        params = {"limit": limit}
        return get_async_api_list(
            self._transport, "/v1/datasets", page=Page[Dataset], params=params
        )
