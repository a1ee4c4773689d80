"""A DDP job's ranks started by the worker itself, where spares are forked
(``workers.training.launch.WarmProcesses.launches_ranks``), instead of by torchrun.

torchrun starts each rank as a new Python with a few launch variables (``RANK``,
``WORLD_SIZE``, ``MASTER_ADDR``...), and each then pays torch's, transformers' and TRL's
imports: seconds of CPU per rank. Here the worker forks the ranks from its warm spare template
(``workers.training.spare_template``) and hands each the same variables with its job
(``spare._become_rank``), or, where the template cannot fork them, starts new processes with
them. A job over several machines starts each machine's ranks alike (every worker of a kind
forks, or none does), meeting at node 0's rendezvous as torchrun's would.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, cast

from workers.training.engines import Rendezvous
from workers.training.forked_spares import CannotFork, TrainingProcess
from workers.training.rank_process import MODULE as RANK_MODULE

logger = logging.getLogger(__name__)


def send_job(
    process: TrainingProcess, job_dir: Path, rank_environment: dict[str, str] | None = None
) -> None:
    """Hand the job in ``job_dir`` to a waiting training process (a spare, the holder of a kept
    engine, a forked rank with its ``rank_environment``). stdin stays open: a process that
    keeps its engine reads its next job there."""
    stdin = cast(IO[bytes], process.stdin)
    message: dict[str, object] = {"job_dir": str(job_dir)}
    if rank_environment:
        message["rank_environment"] = rank_environment
    stdin.write(json.dumps(message).encode() + b"\n")
    stdin.flush()


def rank_environments(
    num_processes: int, master_port: int, rendezvous: Rendezvous | None = None
) -> list[dict[str, str]]:
    """The launch variables torchrun gives each of this machine's ``num_processes`` ranks: on
    one machine (``--standalone``) rank 0 serves the rendezvous store on ``master_port`` here;
    with a ``rendezvous``, this machine's ranks of the job's (node 0's rank 0 serves it at the
    rendezvous' address and port). Like torchrun, one OpenMP thread a rank unless the worker was
    given a count (ranks share the machine's cores)."""
    nodes, node_rank = (
        (1, 0) if rendezvous is None else (rendezvous.num_nodes, rendezvous.node_rank)
    )
    common = {
        "WORLD_SIZE": str(num_processes * nodes),
        "LOCAL_WORLD_SIZE": str(num_processes),
        "MASTER_ADDR": "127.0.0.1" if rendezvous is None else rendezvous.master_addr,
        "MASTER_PORT": str(master_port if rendezvous is None else rendezvous.master_port),
        "GROUP_RANK": str(node_rank),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
    }
    environments = []
    for local_rank in range(num_processes):
        rank = str(node_rank * num_processes + local_rank)
        environments.append(
            {**common, "RANK": rank, "LOCAL_RANK": str(local_rank), "ROLE_RANK": rank}
        )
    return environments


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class RankProcesses:
    """A DDP job's ranks on this machine, started by the worker itself (where spares are
    forked: ``WarmProcesses.launches_ranks``) rather than by torchrun: forked from the spare
    template, with no Python start and no imports per rank (seconds of CPU each), or, where the
    template cannot fork, new Python processes. Each gets the launch variables torchrun would
    set (``rank_environments``). The launcher's ``TrainingProcess``, as torchrun is: its pid is
    the first rank's, whose process group every rank joined (stopping the group stops them
    all); it ends with the first rank that fails (its exit code; the worker then stops the
    rest, as torchrun does), or when every rank has exited cleanly."""

    def __init__(self, ranks: list[TrainingProcess]) -> None:
        self._ranks = ranks
        self.pid = ranks[0].pid
        self.stdin: IO[bytes] | None = None
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            codes = [rank.poll() for rank in self._ranks]
            failed = [code for code in codes if code not in (None, 0)]
            if failed:
                self.returncode = failed[0]
            elif all(code == 0 for code in codes):
                self.returncode = 0
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None or any(r.poll() is None for r in self._ranks):
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"ranks of group {self.pid}", timeout or 0.0)
            time.sleep(0.05)
        return code


def start_ranks(
    job_dir: Path,
    num_processes: int,
    fork: Callable[[int], list[TrainingProcess]],
    rendezvous: Rendezvous | None,
) -> RankProcesses:
    """This machine's ``num_processes`` ranks of the job in ``job_dir``, started by the worker
    (``RankProcesses``): forked (``fork``: the worker's ``WarmProcesses.fork_ranks``), or new
    processes where the template cannot fork them."""
    environments = rank_environments(num_processes, _free_port(), rendezvous)
    try:
        ranks = fork(num_processes)
    except CannotFork as why:
        # New processes, not torchrun: the job's other machines, if any, start theirs as here.
        logger.warning("%s: the job's ranks start as new processes", why)
        started: list[TrainingProcess] = []
        for environment in environments:
            started.append(
                subprocess.Popen(
                    [sys.executable, "-m", RANK_MODULE, str(job_dir)],
                    env={**os.environ, **environment},
                    # The first rank's group, in the worker's session: stopping it stops all.
                    process_group=started[0].pid if started else 0,
                )
            )
        return RankProcesses(started)
    for rank, environment in zip(ranks, environments, strict=True):
        send_job(rank, job_dir, environment)
    return RankProcesses(ranks)
