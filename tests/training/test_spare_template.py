"""The spare template (workers.training.spare_template, forked_spares): spares forked from one
warm process, each in its process group, each end reported with its code, none outliving the
template. Every one-process job of the integration tests trains in such a spare; here, what the
worker relies on when none trains."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
from collections.abc import Callable, Iterator

import pytest

from service.settings import get_settings
from tests.processes import parent_of, wait_gone
from workers.training.forked_spares import ForkedSpare
from workers.training.launch import WarmProcesses, stop_process_group


@pytest.fixture
def spare_fork(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], WarmProcesses]]:
    made: list[WarmProcesses] = []

    def warm_processes(mode: str) -> WarmProcesses:
        monkeypatch.setenv("RFT_SPARE_FORK", mode)
        get_settings.cache_clear()
        made.append(WarmProcesses())
        return made[-1]

    yield warm_processes
    for warm in made:
        warm.stop()
    monkeypatch.delenv("RFT_SPARE_FORK")
    get_settings.cache_clear()


def test_spares_forked_from_the_template_end_on_their_own_and_with_it(
    spare_fork: Callable[[str], WarmProcesses],
) -> None:
    warm = spare_fork("always")
    first = warm.take_spare()  # waits for the template's warm-up
    second = warm.take_spare()  # forked at once
    assert isinstance(first, ForkedSpare) and isinstance(second, ForkedSpare)
    assert len({first.pid, second.pid, os.getpid()}) == 3
    # The template forks as the one thread of its process: a thread alive at a fork is missing
    # in the child with whatever it held (FORK_SAFE_ENV keeps the libraries' threads away).
    template = parent_of(first.pid)
    assert template is not None and parent_of(second.pid) == template
    assert os.listdir(f"/proc/{template}/task") == [str(template)]
    # Each in a process group of its own: the worker stops a job's whole group.
    assert os.getpgid(first.pid) == first.pid and os.getpgid(second.pid) == second.pid
    assert first.poll() is None and second.poll() is None

    # The worker closes stdin without a job (it stops): the spare ends cleanly.
    assert first.stdin is not None
    first.stdin.close()
    assert first.wait(timeout=120) == 0
    # A stopped job's group: the template reports the signal as Popen would.
    os.killpg(second.pid, signal.SIGKILL)
    assert second.wait(timeout=60) == -signal.SIGKILL
    third = warm.take_spare()
    stop_process_group(third, grace_s=30)
    assert third.returncode == -signal.SIGTERM

    # The worker stops (its WarmProcesses with it): the template goes, and a spare with it.
    fourth = warm.take_spare()
    warm.stop()
    assert fourth.wait(timeout=60) != 0
    wait_gone([fourth.pid])  # its death signal comes once the template has exited


def test_without_forking_a_spare_is_a_new_process(
    spare_fork: Callable[[str], WarmProcesses],
) -> None:
    warm = spare_fork("never")
    spare = warm.take_spare()
    assert isinstance(spare, subprocess.Popen)
    assert spare.args[-1] == "workers.training.spare"
    assert spare.stdin is not None
    spare.stdin.close()  # no job: it leaves mid-warm-up
    assert spare.wait(timeout=120) == 0


def test_a_template_with_another_thread_does_not_fork(
    spare_fork: Callable[[str], WarmProcesses],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A value the worker was given stands over FORK_SAFE_ENV's: OpenBLAS starts a pool of two
    # threads in the template, which then refuses to fork, and the spare is a new process.
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "2")
    warm = spare_fork("always")
    with caplog.at_level(logging.WARNING, logger="workers.training.launch"):
        spare = warm.take_spare()
    assert isinstance(spare, subprocess.Popen)
    assert spare.args[-1] == "workers.training.spare"
    assert "not forking beside other threads" in caplog.text
    assert spare.stdin is not None
    spare.stdin.close()
    assert spare.wait(timeout=120) == 0
