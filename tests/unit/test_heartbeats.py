from __future__ import annotations

from datetime import UTC, datetime, timedelta

from service.jobs.heartbeats import HeartbeatSilence

BEAT = datetime(2026, 11, 21, tzinfo=UTC)


def test_silence_is_timed_by_the_readers_clock_from_the_last_change() -> None:
    silence = HeartbeatSilence()
    assert silence.silent_for("job", BEAT, now=100.0) == 0.0
    assert silence.silent_for("job", BEAT, now=130.0) == 30.0  # unchanged for 30 s
    # A new value resets it, however far the worker's clock is from ours.
    assert silence.silent_for("job", BEAT - timedelta(days=1), now=131.0) == 0.0
    assert silence.silent_for("job", BEAT - timedelta(days=1), now=140.0) == 9.0


def test_forgotten_jobs_start_over() -> None:
    silence = HeartbeatSilence()
    silence.silent_for("a", BEAT, now=0.0)
    silence.silent_for("b", BEAT, now=0.0)
    silence.keep_only(["a"])
    assert silence.silent_for("a", BEAT, now=5.0) == 5.0
    assert silence.silent_for("b", BEAT, now=5.0) == 0.0
    silence.forget("a")
    assert silence.silent_for("a", BEAT, now=6.0) == 0.0
