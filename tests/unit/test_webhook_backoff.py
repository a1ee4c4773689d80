"""The webhook retry schedule docs/webhooks.md states: 30 s, doubling, capped at 6 h, 14 tries
over about a day."""

from __future__ import annotations

from service.settings import Settings
from service.webhooks.dispatcher import retry_delay_s


def test_the_default_backoff_doubles_to_its_cap_and_spans_about_a_day() -> None:
    settings = Settings()
    # The wait after each failed try but the last (after the last, the delivery is failed).
    waits = [retry_delay_s(tries, settings) for tries in range(1, settings.webhook_max_attempts)]
    assert waits[:4] == [30, 60, 120, 240]
    assert waits[-3:] == [6 * 3600] * 3
    assert 24 * 3600 < sum(waits) < 27 * 3600
