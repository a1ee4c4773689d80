"""Where a GRPO step's seconds go: one timing helper for both sides of a benchmark.

``instrument(trainer, clock)`` wraps the methods of one TRL 1.16 ``GRPOTrainer`` instance (a
bare script's, or the service's ``RecordingGRPOTrainer`` in its rank process) identically:

| phase | what is timed |
|---|---|
| generation | ``_generate`` (transformers ``generate()`` or vLLM), weight sync excluded |
| reward scoring | ``_calculate_rewards`` (the service: its dispatcher and the sandbox) |
| old/ref log-probs | ``_get_per_token_logps_and_entropies`` called without grad |
| forward+backward | ``training_step`` (``compute_loss`` and ``backward``), rollouts excluded |
| optimizer | the optimizer's ``step`` |
| weight sync | ``vllm_generation.sync_weights`` (vLLM only) |
| recording | the trainer's callbacks (``callback_handler.call_event``): the service's observers |
| everything else | the step's wall time less the phases above (``_prepare_inputs``' own work, |
|  | advantages, clipping, the scheduler, the Trainer's loop) |

Each phase counts its own time: a timed call inside another (the weight sync inside
generation, generation inside ``_prepare_inputs`` inside ``training_step``) is taken out of the
outer one. A step runs from one ``on_step_end`` event to the next, so the first step (model
loading, warm-up) is never in the table and the phases of a step add up to its wall time.

``patch_grpo_train(on_done)`` does the same for every ``GRPOTrainer.train()`` in a process; the
rank process of a LocalStack job gets it through ``bench/phase_hook/sitecustomize.py``.
"""

from __future__ import annotations

import functools
import json
import os
import statistics
import time
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

GENERATION = "generation"
REWARDS = "reward scoring"
LOGPROBS = "old/ref log-probs"
FORWARD_BACKWARD = "forward+backward"
OPTIMIZER = "optimizer"
WEIGHT_SYNC = "weight sync"
RECORDING = "recording"
OTHER = "everything else"
PHASES = (GENERATION, REWARDS, LOGPROBS, FORWARD_BACKWARD, OPTIMIZER, WEIGHT_SYNC, RECORDING, OTHER)

# Where the rank process of a benchmarked service writes its phase files (one per train()).
PHASES_DIR_ENV = "RFT_BENCH_PHASES_DIR"


class PhaseClock:
    """Exclusive time per phase, per step. Not thread-safe: the training thread only."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self._children: list[float] = []  # per open timed call: its timed callees' total
        self._current: dict[str, float] = {}
        self._marks: list[float] = []
        self.steps: list[dict[str, float]] = []  # phases of each step between two marks
        # The recording phase by callback event: seconds over the timed steps, and calls.
        self.events: dict[str, list[float]] = {}

    def timed(
        self, phase: str | Callable[[], str], function: Callable[..., Any]
    ) -> Callable[..., Any]:
        """``function`` with its own time (callees timed too left out) added to ``phase``."""

        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            name = phase() if callable(phase) else phase
            started = self._clock()
            self._children.append(0.0)
            try:
                return function(*args, **kwargs)
            finally:
                elapsed = self._clock() - started
                inner = self._children.pop()
                self._current[name] = self._current.get(name, 0.0) + elapsed - inner
                if self._children:
                    self._children[-1] += elapsed

        return wrapper

    def now(self) -> float:
        return self._clock()

    @property
    def steps_begun(self) -> bool:
        """Whether a step has ended: what is timed from then on belongs to a timed step."""
        return bool(self._marks)

    def mark_step(self) -> None:
        """A step ends here: what was timed since the previous mark is that step's."""
        now = self._clock()
        if self._marks:
            wall = now - self._marks[-1]
            step = {phase: self._current.get(phase, 0.0) for phase in PHASES if phase != OTHER}
            step[OTHER] = wall - sum(step.values())
            self.steps.append(step)
        self._marks.append(now)
        self._current = {}


def _logprob_phase() -> str:
    import torch

    # Old-policy and reference log-probs are computed under no_grad; the loss's own forward
    # (inside compute_loss) has grad on and belongs to forward+backward.
    return FORWARD_BACKWARD if torch.is_grad_enabled() else LOGPROBS


def instrument(trainer: Any, clock: PhaseClock) -> None:
    """Wrap ``trainer``'s phase methods (on the instance: overrides of subclasses included)."""
    for attribute, phase in (
        ("_generate", GENERATION),
        ("_calculate_rewards", REWARDS),
        ("_get_per_token_logps_and_entropies", _logprob_phase),
        ("_prepare_inputs", OTHER),
        ("training_step", FORWARD_BACKWARD),
    ):
        setattr(trainer, attribute, clock.timed(phase, getattr(trainer, attribute)))

    handler = trainer.callback_handler
    call_event = clock.timed(RECORDING, handler.call_event)

    def timed_event(event: str, *args: Any, **kwargs: Any) -> Any:
        if event == "on_step_end":
            clock.mark_step()
        started = clock.now()
        try:
            return call_event(event, *args, **kwargs)
        finally:
            if clock.steps_begun:  # from the end of the first step on, as the steps
                seconds, calls = clock.events.get(event, [0.0, 0])
                clock.events[event] = [seconds + clock.now() - started, calls + 1]

    handler.call_event = timed_event

    create_optimizer = trainer.create_optimizer

    def timed_create_optimizer(*args: Any, **kwargs: Any) -> Any:
        optimizer = create_optimizer(*args, **kwargs)
        if not getattr(optimizer.step, "_phase_timed", False):
            # A bound method again: torch's LR schedulers re-wrap ``step.__func__``.
            timed = clock.timed(OPTIMIZER, optimizer.step.__func__)
            timed._phase_timed = True  # type: ignore[attr-defined]
            optimizer.step = types.MethodType(timed, optimizer)
        return optimizer

    trainer.create_optimizer = timed_create_optimizer

    vllm = getattr(trainer, "vllm_generation", None)
    if vllm is not None:
        vllm.sync_weights = clock.timed(WEIGHT_SYNC, vllm.sync_weights)


def dtypes(trainer: Any) -> dict[str, str]:
    """The trained model's parameter dtype, the mixed precision it trains in, vLLM's dtype."""
    args = trainer.args
    found = {
        "parameters": str(next(trainer.model.parameters()).dtype).removeprefix("torch."),
        "autocast": "bf16" if args.bf16 else "fp16" if args.fp16 else "none",
    }
    vllm = getattr(trainer, "vllm_generation", None)
    llm = getattr(vllm, "llm", None)
    if llm is not None:
        found["vllm"] = str(llm.llm_engine.model_config.dtype).removeprefix("torch.")
    return found


def patch_grpo_train(on_done: Callable[[PhaseClock, Any], None], trainer_class: Any = None) -> None:
    """Every ``GRPOTrainer.train()`` in this process runs instrumented; ``on_done(clock, trainer)``
    gets its phases when it returns (or raises)."""
    if trainer_class is None:
        from trl import GRPOTrainer as trainer_class

    train = trainer_class.train
    if getattr(train, "_phase_timed", False):
        return

    @functools.wraps(train)
    def timed_train(self: Any, *args: Any, **kwargs: Any) -> Any:
        clock = PhaseClock()
        instrument(self, clock)
        try:
            return train(self, *args, **kwargs)
        finally:
            on_done(clock, self)

    timed_train._phase_timed = True  # type: ignore[attr-defined]
    trainer_class.train = timed_train


def write_phases(folder: Path) -> Callable[[PhaseClock, Any], None]:
    """An ``on_done`` that writes each train()'s steps and dtypes to a JSON file in ``folder``."""

    def on_done(clock: PhaseClock, trainer: Any) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        name = f"{time.time_ns()}-{os.getpid()}.json"
        found = {"steps": clock.steps, "dtypes": dtypes(trainer), "events": clock.events}
        (folder / name).write_text(json.dumps(found))

    return on_done


def read_phases(folder: Path, since_ns: int) -> list[dict[str, Any]]:
    """The files write_phases wrote in ``folder`` from ``since_ns`` (time.time_ns()) on."""
    found = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        if int(path.name.split("-", 1)[0]) >= since_ns:
            found.append(json.loads(path.read_text()))
    return found


def median_phases(steps: Sequence[dict[str, float]]) -> dict[str, float]:
    """Per phase, the median over ``steps`` of its seconds, and the median step ("step")."""
    if not steps:
        raise ValueError("no timed steps: a run needs at least 2 steps to time one")
    medians = {phase: statistics.median(step.get(phase, 0.0) for step in steps) for phase in PHASES}
    medians["step"] = statistics.median(sum(step.values()) for step in steps)
    return medians


def phase_table(
    service: Sequence[dict[str, float]],
    bare: Sequence[dict[str, float]],
    *,
    service_dtypes: dict[str, str] | None = None,
    bare_dtypes: dict[str, str] | None = None,
) -> str:
    """Side by side: the median seconds per step of each phase, the service's extra and ratio."""
    ours, theirs = median_phases(service), median_phases(bare)
    lines = [
        f"{'phase':<20} {'service ms':>11} {'bare ms':>9} {'extra ms':>9} {'service/bare':>13}",
    ]
    for phase in (*PHASES, "step"):
        a, b = ours[phase] * 1000, theirs[phase] * 1000
        ratio = f"{a / b:.3f}" if b > 0.0005 else "-"  # under 0.5 us: no meaningful ratio
        label = "step (median)" if phase == "step" else phase
        lines.append(f"{label:<20} {a:>11.2f} {b:>9.2f} {a - b:>+9.2f} {ratio:>13}")
    lines.append(
        f"steps timed: service {len(service)}, bare {len(bare)}; medians per phase do not add "
        "up to the median step exactly"
    )
    for side, found in (("service", service_dtypes), ("bare", bare_dtypes)):
        if found:
            lines.append(f"{side} dtypes: " + ", ".join(f"{k} {v}" for k, v in found.items()))
    return "\n".join(lines)
