"""The dispatcher: sends the outbox's due deliveries, one per transaction, and logs each try.

A pass (``Dispatcher.run_once``) takes the pending delivery due longest with ``FOR UPDATE
SKIP LOCKED``, sends it, writes the attempt and when the next one is due, and commits; then the
next. The row stays locked while its request is out, so any number of dispatchers (every
worker process runs one, workers.webhooks) share the outbox and never send one delivery twice
at once; one that dies mid-send leaves its row pending, and another sends it again: delivery
is at least once, and receivers drop repeats by ``webhook-id``.

Retries back off exponentially: ``webhook_retry_base_s`` after the first failed try, doubling
up to ``webhook_retry_max_s``, until ``webhook_max_attempts`` tries have failed (then the
delivery is ``failed``). Time comes from ``clock``, so tests step through the backoff without
waiting; the signature's timestamp is always the wall clock, which the receiver checks.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import httpx
from sqlalchemy.orm import Session, sessionmaker

from sandbox.egress import EgressPolicy
from service.models import WebhookAttempt, WebhookDelivery
from service.secrets import SecretsKeyError, unseal
from service.settings import Settings
from service.webhooks.delivery import AttemptResult, send
from service.webhooks.repository import DELIVERED, FAILED, WebhookRepository
from service.webhooks.signing import signed_headers

logger = logging.getLogger(__name__)

# The key of an endpoint's signing secret in its sealed secrets.
SECRET_KEY = "secret"
# Deliveries one pass sends at most, so a long outbox does not starve the loop's stop check.
PASS_LIMIT = 100


def _utcnow() -> datetime:
    return datetime.now(UTC)


def retry_delay_s(failed_attempts: int, settings: Settings) -> float:
    """The wait after ``failed_attempts`` failed tries (1 for the first)."""
    doubled = settings.webhook_retry_base_s * 2 ** min(failed_attempts - 1, 40)
    return min(settings.webhook_retry_max_s, doubled)


@dataclass
class Dispatcher:
    sessions: sessionmaker[Session]
    settings: Settings
    policy: EgressPolicy
    clock: Callable[[], datetime] = _utcnow
    transport: httpx.BaseTransport | None = None  # a test's stand-in for the network, if any

    def run_once(self, limit: int = PASS_LIMIT) -> int:
        """Send the deliveries due now (up to ``limit``); how many tries were made."""
        tries = 0
        while tries < limit and self.send_next():
            tries += 1
        return tries

    def send_next(self) -> bool:
        """Try the delivery due longest; False when none is due (or every due one is being
        sent by another dispatcher)."""
        with self.sessions.begin() as session:
            repository = WebhookRepository(session)
            now = self.clock()
            delivery = repository.next_due(now)
            if delivery is None:
                return False
            endpoint = repository.get_endpoint_any_tenant(delivery.endpoint_id)
            if endpoint is None:  # cannot be (its deliveries go with it): never retried
                delivery.status, delivery.next_attempt_at = FAILED, None
                return True
            try:
                secret = unseal(endpoint.secret_sealed, self.settings)[SECRET_KEY]
            except SecretsKeyError as error:
                outcome = AttemptResult(None, str(error), 0.0)
            else:
                # Wall time, not ``clock``: the receiver holds the timestamp to its own clock.
                timestamp = int(time.time())
                headers = signed_headers(secret, delivery.id, timestamp, delivery.body)
                outcome = send(
                    endpoint.url,
                    headers,
                    delivery.body,
                    policy=self.policy,
                    timeout_s=self.settings.webhook_timeout_s,
                    transport=self.transport,
                )
            self._record(repository, delivery, outcome, now)
        return True

    def _record(
        self,
        repository: WebhookRepository,
        delivery: WebhookDelivery,
        outcome: AttemptResult,
        now: datetime,
    ) -> None:
        delivery.attempts += 1
        repository.add_attempt(
            WebhookAttempt(
                delivery_id=delivery.id,
                number=delivery.attempts,
                attempted_at=now,
                status_code=outcome.status_code,
                error=outcome.error,
                duration_ms=outcome.duration_ms,
            )
        )
        if outcome.delivered:
            delivery.status = DELIVERED
            delivery.delivered_at = now
            delivery.next_attempt_at = None
        elif delivery.attempts >= self.settings.webhook_max_attempts:
            delivery.status = FAILED
            delivery.next_attempt_at = None
            logger.warning(
                "webhook delivery %s (%s) failed after %d tries: %s",
                delivery.id,
                delivery.event_type,
                delivery.attempts,
                outcome.error,
            )
        else:
            delay = retry_delay_s(delivery.attempts, self.settings)
            delivery.next_attempt_at = now + timedelta(seconds=delay)
