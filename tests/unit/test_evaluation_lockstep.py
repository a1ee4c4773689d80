"""Validation under FSDP: every rank calls generate() as often as the rank with the largest
share, since each forward gathers the layers' weights from all ranks (a rank that skipped a
call left the others waiting forever, shown with fully_shard on a CPU mesh). The extra calls
are fillers whose output is dropped; other engines make no extra call."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from service.jobs.schemas import AVAILABLE_ENGINES
from workers.training import evaluation
from workers.training.evaluation import (
    PROMPTS_PER_BATCH,
    Evaluator,
    ValidationSettings,
    generate_calls,
    lockstep_calls,
)
from workers.training.ranks import RankGroup

SETTINGS = ValidationSettings(
    every=None,
    samples_per_prompt=1,
    max_prompts=1000,
    temperature=0.0,
    max_completion_length=3,
    stop=(),
    seed=0,
)


class CountingModel(torch.nn.Module):
    """Writes tokens 7, 8, 9 after every prompt and counts its generate() calls."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.calls: list[int] = []

    def generate(self, input_ids: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        self.calls.append(len(input_ids))
        written = torch.tensor([[7, 8, 9]] * len(input_ids))
        return torch.cat([input_ids, written], dim=1)


def trainer(fsdp: bool) -> Any:
    return SimpleNamespace(
        is_fsdp_enabled=fsdp,
        processing_class=SimpleNamespace(pad_token_id=0),
        args=SimpleNamespace(gradient_checkpointing_kwargs=None),
        model_wrapped=None,
        accelerator=None,
        _tokenize_prompts=lambda prompts: ([[1, 2, 3]], None, None),
        _decode=lambda ids: "".join(str(i) for i in ids),
    )


@pytest.fixture
def model(monkeypatch: pytest.MonkeyPatch) -> Iterator[CountingModel]:
    counting = CountingModel()

    @contextlib.contextmanager
    def unwrapped(*args: Any, **kwargs: Any) -> Iterator[CountingModel]:
        yield counting

    monkeypatch.setattr(evaluation, "unwrap_model_for_generation", unwrapped)
    yield counting


@pytest.mark.parametrize(
    ("rows", "world_size", "calls"),
    [(3, 2, 1), (1, 2, 1), (2 * PROMPTS_PER_BATCH + 1, 2, 2), (PROMPTS_PER_BATCH, 1, 1)],
)
def test_every_rank_makes_the_calls_of_the_largest_share(
    rows: int, world_size: int, calls: int
) -> None:
    assert generate_calls(rows, world_size) == calls
    evaluator = Evaluator([{"prompt": f"p{i}"} for i in range(rows)], SETTINGS)
    shares = [evaluator._share(RankGroup(rank=r, world_size=world_size)) for r in range(world_size)]
    largest = max(len(share) for share in shares)
    assert calls == -(-largest // PROMPTS_PER_BATCH)


def test_a_rank_without_prompts_still_generates_under_fsdp(model: CountingModel) -> None:
    evaluator = Evaluator([{"prompt": "only"}], SETTINGS)
    # One prompt over two ranks: rank 0's share is empty, yet it calls generate() once, as
    # rank 1 does for the prompt.
    assert evaluator._share(RankGroup(rank=0, world_size=2)) == []
    assert evaluator._generate(trainer(fsdp=True), [], step=1, calls=1) == []
    assert model.calls == [1]


def test_a_smaller_share_fills_in_and_keeps_only_its_own_completions(
    model: CountingModel,
) -> None:
    evaluator = Evaluator([{"prompt": f"p{i}"} for i in range(2 * PROMPTS_PER_BATCH + 1)], SETTINGS)
    prompts = [row["prompt"] for row in evaluator._share(RankGroup(rank=0, world_size=2))]
    assert len(prompts) == PROMPTS_PER_BATCH  # one batch; rank 1 has two
    completions = evaluator._generate(trainer(fsdp=True), prompts, step=1, calls=2)
    assert model.calls == [PROMPTS_PER_BATCH, 1]  # its batch, then one filler
    assert completions == ["789"] * PROMPTS_PER_BATCH


@pytest.mark.parametrize(
    ("engine", "rows", "world_size", "calls"),
    [
        ("fsdp", 1, 2, 1),
        ("fsdp", 2 * PROMPTS_PER_BATCH + 1, 2, 2),
        ("fsdp", PROMPTS_PER_BATCH, 1, 1),
        *[
            (engine, rows, 2, 0)
            for engine in sorted(AVAILABLE_ENGINES - {"fsdp"})
            for rows in (1, 33)
        ],
    ],
)
def test_only_fsdp_ranks_generate_in_lockstep(
    engine: str, rows: int, world_size: int, calls: int
) -> None:
    assert lockstep_calls(engine, rows, world_size) == calls


class AloneInAGroup(RankGroup):
    """A rank of a group, gathering only its own share (no process group)."""

    def gather(self, value: Any) -> list[Any]:
        return [value]


@pytest.mark.parametrize(
    ("engine", "calls"),
    [("is_fsdp_enabled", [1]), ("is_deepspeed_enabled", []), (None, [])],
    ids=["fsdp", "deepspeed", "ddp"],
)
def test_a_rank_without_prompts_generates_only_under_fsdp(
    model: CountingModel, engine: str | None, calls: list[int]
) -> None:
    """Through evaluate(), where the engine decides: one prompt over two ranks leaves rank 0
    without prompts; it calls generate() once under FSDP (rank 1 generates for the prompt),
    and never under another engine (no rank waits for it there)."""
    evaluator = Evaluator([{"prompt": "only"}], SETTINGS)
    running = trainer(fsdp=False)
    if engine is not None:
        setattr(running, engine, True)
    dispatcher = SimpleNamespace(
        config=SimpleNamespace(functions=[], version=1),
        sandbox=None,
        agents=None,  # not an agent job
        reward_sources=lambda: [],
    )
    record = evaluator.evaluate(running, dispatcher, step=1, ranks=AloneInAGroup(0, 2))
    assert model.calls == calls
    assert record.samples == 0 and record.prompts == 1
