"""The ranks of one training job, as the step reporter and the rank observer see them.

With one process every helper is a plain call. With N processes (torchrun) one rank decides
(rank 0, which talks to the worker) and hands its decision to every rank at the same step
boundary, so no step mixes two reward configs and no rank waits alone in a collective; and
rank 0 gathers every rank's scored samples so that a step's record holds each completion once.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar

import torch.distributed as dist

from sandbox.api import FunctionResult, RewardError

if TYPE_CHECKING:  # a type only: the rank group sits below scoring
    from workers.training.reward_dispatch import ScoredGeneration

T = TypeVar("T")


class RankSetupError(RuntimeError):
    """The launcher started N processes but they did not form one job."""


@dataclass(frozen=True)
class RankGroup:
    rank: int
    world_size: int

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @classmethod
    def current(cls) -> RankGroup:
        """This process's place in the job, checked against what the launcher asked for."""
        expected = int(os.environ.get("WORLD_SIZE", "1"))
        if not (dist.is_available() and dist.is_initialized()):
            if expected > 1:
                # Under torchrun without use_cpu on a CPU machine each rank trains
                # alone, twice the same job; better no job than that.
                raise RankSetupError(
                    f"the launcher started {expected} processes but torch.distributed is not "
                    "initialised: each would train alone"
                )
            return cls(rank=0, world_size=1)
        group = cls(rank=dist.get_rank(), world_size=dist.get_world_size())
        if group.world_size != expected:
            raise RankSetupError(
                f"the trainer runs on {group.world_size} processes, the launcher started {expected}"
            )
        return group

    def from_main(self, decide: Callable[[], T]) -> T:
        """``decide()`` run on rank 0 only; every rank returns its result."""
        if self.world_size == 1:
            return decide()
        holder: list[Any] = [decide() if self.is_main else None]
        dist.broadcast_object_list(holder, src=0)
        return holder[0]  # type: ignore[no-any-return]

    def gather(self, value: T) -> list[T]:
        """Every rank's ``value``, in rank order, on every rank."""
        if self.world_size == 1:
            return [value]
        gathered: list[Any] = [None] * self.world_size
        dist.all_gather_object(gathered, value)
        return gathered

    def any(self, flag: bool) -> bool:
        return any(self.gather(flag))


def merge_generations(
    parts: Sequence[tuple[ScoredGeneration, list[float | None]]],
) -> tuple[ScoredGeneration, list[float | None]]:
    """One step's generation from every rank's slice, in rank order (TRL's global order: it
    gathers rewards rank by rank and hands rank r the r-th slice of the advantages back)."""
    first = parts[0][0]
    if any(g.config_version != first.config_version for g, _ in parts):
        raise RankSetupError("the ranks scored one step with different reward configs")
    results: dict[str, FunctionResult] = {}
    advantages: list[float | None] = []
    offset = 0
    for rank, (generation, rank_advantages) in enumerate(parts):
        size = len(generation.completions)
        if len(rank_advantages) == size:
            advantages.extend(rank_advantages)
        else:
            advantages.extend([None] * size)
        for name, result in generation.results.items():
            merged = results.setdefault(
                name, FunctionResult(name=name, version=result.version, scores=[])
            )
            merged.scores.extend(result.scores)
            merged.errors.extend(_shifted(result.errors, offset, size))
            if result.logs:
                merged.logs += f"[rank {rank}]\n{result.logs}"
                if not result.logs.endswith("\n"):
                    merged.logs += "\n"
            merged.logs_truncated = merged.logs_truncated or result.logs_truncated
            merged.duration_s = max(merged.duration_s, result.duration_s)
        offset += size
    merged_generation = replace(
        first,
        prompts=[p for g, _ in parts for p in g.prompts],
        completions=[c for g, _ in parts for c in g.completions],
        token_counts=[t for g, _ in parts for t in g.token_counts],
        dataset_indices=[i for g, _ in parts for i in g.dataset_indices],
        totals=[t for g, _ in parts for t in g.totals],
        results=results,
        trajectories=(
            [t for g, _ in parts for t in g.trajectories or []]
            if first.trajectories is not None
            else None
        ),
    )
    return merged_generation, advantages


def _shifted(errors: list[RewardError], offset: int, size: int) -> list[RewardError]:
    """A rank's errors with sample indices of the whole step. An error about a rank's whole
    call (no sample index) concerns that rank's samples only, not the whole step: it becomes
    one error per sample of that slice (the traceback kept on the first)."""
    shifted: list[RewardError] = []
    for error in errors:
        if error.sample_index is not None:
            shifted.append(replace(error, sample_index=error.sample_index + offset))
            continue
        for index in range(size):
            shifted.append(
                replace(
                    error,
                    sample_index=offset + index,
                    traceback=error.traceback if index == 0 else None,
                )
            )
    return shifted
