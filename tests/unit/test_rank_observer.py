"""Rank 0's observer does not wait for the worker's answer to a step's record (None): the next
question reads both answers, in order, so a decision the record caused (a guard's pause) is
still the answer at that step, and the training thread saves a round trip per step."""

from __future__ import annotations

from multiprocessing import Pipe
from pathlib import Path
from typing import Any

import pytest

from workers.training.rank_process import RankObserver
from workers.training.spec import TrainingOutcome


def record(step: int) -> Any:
    return {"step": step}  # what crosses the connection: any picklable record


def test_a_record_is_sent_without_waiting_and_the_next_question_reads_both_answers() -> None:
    rank, worker = Pipe()
    observer = RankObserver(rank, sandbox=None)

    observer.on_step(record(1))  # returns at once: the worker has not answered
    assert worker.recv() == ("on_step", (record(1),))
    worker.send(None)  # the record's answer, not read yet
    worker.send("paused by guard")  # the worker's answer to the question that follows
    assert observer.should_stop() == "paused by guard"
    assert worker.recv() == ("should_stop", ())

    observer.on_step(record(2))
    worker.send(None)
    worker.send(None)
    assert observer.poll_reward_config(1, starting_step=3) is None
    assert [worker.recv(), worker.recv()] == [
        ("on_step", (record(2),)),
        ("poll_reward_config", (1, 3)),
    ]

    outcome = TrainingOutcome(steps_completed=2, stop_reason=None, adapter_path=Path("a"))
    observer.on_step(record(3))
    worker.send(None)
    worker.send(None)
    observer.finish(outcome, keeps_engine=False)
    assert worker.recv() == ("on_step", (record(3),))
    assert worker.recv() == ("finished", (outcome, False))
    assert not rank.poll()  # every answer was read: nothing is left for a later call


def test_a_worker_that_failed_on_the_record_is_met_by_the_next_question() -> None:
    rank, worker = Pipe()
    observer = RankObserver(rank, sandbox=None)
    observer.on_step(record(1))
    assert worker.recv() == ("on_step", (record(1),))
    worker.close()  # the worker's observer raised: it stops answering and closes
    with pytest.raises((EOFError, OSError)):
        observer.should_stop()
