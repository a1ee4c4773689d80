from __future__ import annotations

from types import TracebackType

import httpx

from rft.resources.chat import AsyncChat, AsyncCompletions, Chat, Completions
from rft.resources.datasets import AsyncDatasets, Datasets
from rft.resources.jobs import AsyncJobs, Jobs
from rft.resources.models import AsyncModels, Models
from rft.resources.reward_functions import AsyncRewardFunctions, RewardFunctions
from rft.resources.usage import AsyncUsage, Usage
from rft.resources.webhooks import AsyncWebhooks, Webhooks
from rft.transport import (
    DEFAULT_MAX_RETRIES,
    DEFAULT_TIMEOUT_S,
    AsyncTransport,
    SyncTransport,
    resolve_settings,
)


class Client:
    """The rft API. ``api_key`` and ``base_url`` default to RFT_API_KEY and RFT_BASE_URL.

    >>> client = Client()
    >>> job = client.jobs.create(dataset=ds.id, reward_functions={"fmt": my_function})
    """

    def __init__(
        self,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        max_retries: int = DEFAULT_MAX_RETRIES,
        http_client: httpx.Client | None = None,
    ) -> None:
        self.api_key, self.base_url = resolve_settings(api_key, base_url)
        self._transport = SyncTransport(
            api_key=self.api_key,
            base_url=self.base_url,
            timeout=timeout,
            max_retries=max_retries,
            http_client=http_client,
        )
        self.datasets = Datasets(self._transport)
        self.jobs = Jobs(self._transport)
        self.models = Models(self._transport)
        self.reward_functions = RewardFunctions(self._transport)
        self.chat = Chat(self._transport)
        self.completions = Completions(self._transport)
        self.usage = Usage(self._transport)
        self.webhooks = Webhooks(self._transport)

    def close(self) -> None:
        self._transport.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


class AsyncClient:
    """The rft API for asyncio code; the same resources as :class:`Client`, awaited."""

    def __init__(
        self,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        max_retries: int = DEFAULT_MAX_RETRIES,
        http_client: httpx.AsyncClient | None = None,
    ) -> None:
        self.api_key, self.base_url = resolve_settings(api_key, base_url)
        self._transport = AsyncTransport(
            api_key=self.api_key,
            base_url=self.base_url,
            timeout=timeout,
            max_retries=max_retries,
            http_client=http_client,
        )
        self.datasets = AsyncDatasets(self._transport)
        self.jobs = AsyncJobs(self._transport)
        self.models = AsyncModels(self._transport)
        self.reward_functions = AsyncRewardFunctions(self._transport)
        self.chat = AsyncChat(self._transport)
        self.completions = AsyncCompletions(self._transport)
        self.usage = AsyncUsage(self._transport)
        self.webhooks = AsyncWebhooks(self._transport)

    async def close(self) -> None:
        await self._transport.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()
