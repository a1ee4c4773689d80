"""The webhook dispatcher's loop: every worker process runs one (started with the lost-worker
reaper, workers.lifecycle), sending the outbox's due deliveries (service.webhooks.dispatcher).

Why the workers and not the API: the API answers requests and may run as many processes as
the load needs, with nothing of its own in the background; the workers already run the
deployment's background loops (the reaper), and sending a webhook is such work. Any number of
dispatchers share the outbox (rows locked with SKIP LOCKED), so adding workers adds senders
and never double sends; a restarted worker finds its undelivered rows where it left them.
A deployment whose workers are all stopped sends webhooks again once one starts.
"""

from __future__ import annotations

import logging

from service.db import get_sessionmaker
from service.settings import Settings
from service.webhooks.delivery import egress_policy
from service.webhooks.dispatcher import Dispatcher
from workers.periodic import PeriodicThread

logger = logging.getLogger(__name__)


class WebhookDispatcherThread(PeriodicThread):
    def __init__(self, settings: Settings) -> None:
        self.dispatcher = Dispatcher(get_sessionmaker(), settings, egress_policy(settings))
        super().__init__(
            "webhook-dispatcher",
            settings.webhook_dispatch_interval_s,
            self.dispatcher.run_once,
            lambda _: logger.exception("webhook dispatch failed; retrying"),
        )
