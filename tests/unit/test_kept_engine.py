"""A job's colocated vLLM engine kept for the next job: which trainer adopts it, and what the
keeping puts back. Stand-in engines here; the real vLLM engine (CPU build) is kept and adopted
in tests/vllm_generation/test_vllm_engine_reuse.py."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from workers.training import kept_engine
from workers.training.kept_engine import EngineKeeper

LAUNCH = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "localhost"}


@dataclass
class StandInLLM:
    """What kept_engine touches of vLLM's ``LLM``."""

    sleeping: bool = False
    calls: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        core = SimpleNamespace(shutdown=lambda: self.calls.append("shutdown"))
        self.llm_engine = SimpleNamespace(engine_core=core, is_sleeping=lambda: self.sleeping)

    def reset_prefix_cache(self) -> None:
        self.calls.append("reset_prefix_cache")

    def sleep(self, level: int) -> None:
        self.calls.append(f"sleep {level}")
        self.sleeping = True


def generation(
    model: str = "/models/tiny", processes: int = 1, sleep: bool = False, **settings: Any
) -> Any:
    """A stand-in for TRL's VLLMGeneration, with the fields its engine is built from."""
    return SimpleNamespace(
        mode="colocate",
        model=SimpleNamespace(name_or_path=model, modules=lambda: []),
        accelerator=SimpleNamespace(num_processes=processes, process_index=0),
        tensor_parallel_size=1,
        gpu_memory_utilization=settings.get("gpu_memory_utilization", 0.3),
        max_model_length=settings.get("max_model_length", 128),
        max_num_seqs=None,
        enable_sleep_mode=sleep,
        model_impl="auto",
        trust_remote_code=False,
    )


def trl_start(built: list[StandInLLM]) -> Any:
    """TRL's _init_vllm as far as kept_engine can tell: it sets the launch variables, builds an
    engine and leaves the random state moved."""

    def start(target: Any) -> None:
        os.environ.update(LAUNCH)
        torch.manual_seed(1234)
        target.llm = StandInLLM()
        built.append(target.llm)

    return start


def release(trainer: Any) -> None:
    trainer.released = True


@pytest.fixture(autouse=True)
def fresh_process(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in kept_engine._LAUNCH_VARIABLES:
        # Set first, so that undoing puts back what was there (or nothing): these variables
        # left behind would make later tests' trainers think they run under a launcher.
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    yield


def run_job(keeper: EngineKeeper, built: list[StandInLLM], **engine: Any) -> Any:
    """A job's engine start then its successful end; the trainer stand-in."""
    trainer = SimpleNamespace(vllm_generation=generation(**engine), released=False)
    keeper._start_or_adopt(trainer.vllm_generation, trl_start(built))
    keeper.keep_or_release(trainer, release)
    return trainer


def test_the_next_job_adopts_the_kept_engine() -> None:
    keeper = EngineKeeper(may_keep=True)
    built: list[StandInLLM] = []
    first = run_job(keeper, built)
    assert not first.released and first.vllm_generation.llm is None
    assert keeper.kept_model() == "/models/tiny"
    # The launch variables go back as they were before the engine: the next trainer's
    # accelerate state must not read them as a distributed launch.
    assert not set(LAUNCH) & set(os.environ)
    assert built[0].calls == ["reset_prefix_cache"]

    second = SimpleNamespace(vllm_generation=generation(), released=False)
    keeper._start_or_adopt(second.vllm_generation, trl_start(built))
    assert len(built) == 1, "a second engine was built"
    assert second.vllm_generation.llm is built[0]
    assert keeper.adoptions() == 1 and keeper.kept_model() is None
    assert {name: os.environ[name] for name in LAUNCH} == LAUNCH


def test_an_adopted_engine_draws_as_a_fresh_one() -> None:
    keeper = EngineKeeper(may_keep=True)
    built: list[StandInLLM] = []
    run_job(keeper, built)
    torch.manual_seed(7)
    adopted = SimpleNamespace(vllm_generation=generation())
    keeper._start_or_adopt(adopted.vllm_generation, trl_start(built))
    after_adoption = torch.rand(4)
    torch.manual_seed(1234)  # where TRL's start leaves the generator
    assert torch.equal(after_adoption, torch.rand(4))


@pytest.mark.parametrize(
    "different",
    [
        {"model": "/models/other"},
        {"gpu_memory_utilization": 0.5},
        {"max_model_length": 256},
        {"sleep": True},
    ],
)
def test_an_engine_built_otherwise_is_shut_down_and_a_new_one_started(
    different: dict[str, Any],
) -> None:
    keeper = EngineKeeper(may_keep=True)
    built: list[StandInLLM] = []
    run_job(keeper, built)
    run_job(keeper, built, **different)
    assert len(built) == 2
    assert built[0].calls[-1] == "shutdown"
    assert keeper.adoptions() == 0
    assert keeper.kept_model() == different.get("model", "/models/tiny")


def test_a_sleep_mode_engine_is_kept_asleep_and_adopted_as_trl_starts_one() -> None:
    keeper = EngineKeeper(may_keep=True)
    built: list[StandInLLM] = []
    run_job(keeper, built, sleep=True)
    assert built[0].calls == ["reset_prefix_cache", "sleep 2"]
    adopted = generation(sleep=True)
    keeper._start_or_adopt(adopted, trl_start(built))
    # As TRL's own start: asleep at level 2, the weights pushed by the first sync.
    assert adopted.llm is built[0] and adopted._llm_weights_sleeping is True


def test_without_permission_or_with_several_processes_the_engine_is_released() -> None:
    built: list[StandInLLM] = []
    assert run_job(EngineKeeper(), built).released  # a process that was not allowed to keep
    keeper = EngineKeeper(may_keep=True)
    assert run_job(keeper, built, processes=2).released  # ranks of torchrun exit with the job
    assert keeper.kept_model() is None


def test_release_kept_shuts_the_engine_down_once() -> None:
    keeper = EngineKeeper(may_keep=True)
    built: list[StandInLLM] = []
    run_job(keeper, built)
    keeper.release_kept()
    keeper.release_kept()
    assert built[0].calls == ["reset_prefix_cache", "shutdown"]
    assert keeper.kept_model() is None


def test_a_fresh_engine_gets_a_port_the_kernel_handed_out_unless_one_is_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """TRL takes 29500 when its check calls it free, which it does while another process's
    engine listens there: the engine's port is asked of the kernel instead."""
    keeper = EngineKeeper(may_keep=True)
    ports: list[str | None] = []

    def start(target: Any) -> None:
        ports.append(os.environ.get("MASTER_PORT"))
        target.llm = StandInLLM()

    trainer = SimpleNamespace(vllm_generation=generation(), released=False)
    keeper._start_or_adopt(trainer.vllm_generation, start)
    port = ports[-1]
    assert port is not None and int(port) > 0
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("", int(port)))  # nothing else holds it
    keeper.keep_or_release(trainer, release)
    assert "MASTER_PORT" not in os.environ  # put back as it was before the engine
    keeper.release_kept()

    monkeypatch.setenv("MASTER_PORT", "41234")  # a launcher's (torchrun's) port stands
    keeper._start_or_adopt(generation(), start)
    assert ports[-1] == "41234"


def test_trls_engine_start_goes_through_the_keeper_only_while_a_trainer_is_built() -> None:
    """No lasting patch on TRL's class: the route is in place only inside the block."""
    from trl.generation.vllm_generation import VLLMGeneration

    trl_start = VLLMGeneration.__dict__["_init_vllm"]
    keeper = EngineKeeper(may_keep=True)
    with keeper.routing_engine_starts():
        routed = VLLMGeneration.__dict__["_init_vllm"]
        assert routed is not trl_start
        with EngineKeeper().routing_engine_starts():  # an inner route wraps TRL's, not ours
            inner = VLLMGeneration.__dict__["_init_vllm"]
            assert inner._rft_trl_init_vllm is trl_start
        assert VLLMGeneration.__dict__["_init_vllm"] is routed
    assert VLLMGeneration.__dict__["_init_vllm"] is trl_start
    assert keeper.kept_model() is None and keeper.adoptions() == 0
