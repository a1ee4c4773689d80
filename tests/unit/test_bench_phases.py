"""bench/phases.py, the one timing helper both sides of bench_overhead and bench_gpu_vllm use:
each phase counts its own time (nested timed calls taken out), a step's phases add up to its
wall time, the wrappers keep what they wrap working (torch's LR scheduler re-wraps the
optimizer's step), and the table gives each phase's extra and ratio."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import phases  # bench/phases.py


class FakeClock:
    """A clock that moves only when told to: timings are exact, not measured."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def spend(self, seconds: float) -> None:
        self.now += seconds


def test_a_nested_timed_call_is_taken_out_of_the_outer_one() -> None:
    time = FakeClock()
    clock = phases.PhaseClock(time)

    def sync() -> None:
        time.spend(0.25)

    timed_sync = clock.timed(phases.WEIGHT_SYNC, sync)

    def generate() -> str:
        time.spend(1.0)
        timed_sync()
        time.spend(0.5)
        return "completions"

    clock.mark_step()
    assert clock.timed(phases.GENERATION, generate)() == "completions"
    time.spend(0.125)  # untimed: the Trainer's loop
    clock.mark_step()

    (step,) = clock.steps
    assert step[phases.GENERATION] == 1.5
    assert step[phases.WEIGHT_SYNC] == 0.25
    assert step[phases.OTHER] == 0.125
    assert sum(step.values()) == 1.875  # the step's wall time
    assert set(step) == set(phases.PHASES)


def test_a_phase_may_be_chosen_at_call_time_and_an_exception_still_counts() -> None:
    time = FakeClock()
    clock = phases.PhaseClock(time)
    chosen = iter([phases.LOGPROBS, phases.FORWARD_BACKWARD])

    def fails() -> None:
        time.spend(2.0)
        raise ValueError("reward code raised")

    timed = clock.timed(lambda: next(chosen), fails)
    clock.mark_step()
    for _ in range(2):
        with pytest.raises(ValueError, match="reward code raised"):
            timed()
    clock.mark_step()
    assert clock.steps[0][phases.LOGPROBS] == 2.0
    assert clock.steps[0][phases.FORWARD_BACKWARD] == 2.0


def test_before_the_first_step_ends_nothing_is_a_step() -> None:
    time = FakeClock()
    clock = phases.PhaseClock(time)
    clock.timed(phases.GENERATION, lambda: time.spend(30.0))()  # model loading, warm-up
    clock.mark_step()
    assert clock.steps == []
    clock.mark_step()
    assert clock.steps == [{phase: 0.0 for phase in phases.PHASES}]


class FakeHandler:
    def __init__(self) -> None:
        self.events: list[str] = []

    def call_event(self, event: str, *args: Any, **kwargs: Any) -> str:
        self.events.append(event)
        return event


class FakeVllm:
    def __init__(self, time: FakeClock) -> None:
        self.time = time

    def sync_weights(self) -> None:
        self.time.spend(0.5)


class FakeTrainer:
    """The methods ``instrument`` wraps, calling each other as TRL 1.16's GRPOTrainer does."""

    def __init__(self, time: FakeClock) -> None:
        self.time = time
        self.callback_handler = FakeHandler()
        self.vllm_generation = FakeVllm(time)
        self.parameter = torch.nn.Parameter(torch.zeros(2))

    def _generate(self, prompts: list[str]) -> list[str]:
        self.vllm_generation.sync_weights()
        self.time.spend(4.0)
        return prompts

    def _calculate_rewards(self) -> None:
        self.time.spend(2.0)

    def _get_per_token_logps_and_entropies(self) -> None:
        self.time.spend(1.0 if torch.is_grad_enabled() else 0.75)

    def _prepare_inputs(self) -> None:
        self._generate(["p"])
        self._calculate_rewards()
        with torch.no_grad():
            self._get_per_token_logps_and_entropies()  # old policy
        self.time.spend(0.25)  # advantages, tokenizing

    def training_step(self) -> None:
        self._prepare_inputs()
        self._get_per_token_logps_and_entropies()  # the loss's forward
        self.time.spend(3.0)  # backward

    def create_optimizer(self) -> torch.optim.Optimizer:
        time = self.time

        class SlowSGD(torch.optim.SGD):
            def step(self, closure: Any = None) -> Any:
                time.spend(0.5)
                return super().step(closure)

        self.optimizer = SlowSGD([self.parameter], lr=0.5)
        return self.optimizer

    def step(self) -> None:
        """One step as Trainer's loop runs it."""
        self.callback_handler.call_event("on_step_begin")
        self.training_step()
        self.parameter.grad = torch.ones(2)
        self.optimizer.step()
        self.time.spend(0.125)  # clipping, the scheduler, zero_grad
        self.callback_handler.call_event("on_step_end")
        self.callback_handler.call_event("on_log")


def test_instrument_times_each_phase_of_a_trainers_step() -> None:
    time = FakeClock()
    clock = phases.PhaseClock(time)
    trainer = FakeTrainer(time)
    phases.instrument(trainer, clock)
    trainer.create_optimizer()
    # Created after the optimizer, as Trainer does: it wraps step.__func__ again.
    scheduler = torch.optim.lr_scheduler.LambdaLR(trainer.optimizer, lambda _: 1.0)
    for _ in range(3):
        trainer.step()
        scheduler.step()

    assert trainer.parameter.tolist() == [-1.5, -1.5]  # the optimizer still steps
    assert trainer.callback_handler.events[:3] == ["on_step_begin", "on_step_end", "on_log"]
    assert len(clock.steps) == 2  # between the 3 steps' ends
    for step in clock.steps:
        assert step == {
            phases.GENERATION: 4.0,
            phases.REWARDS: 2.0,
            phases.LOGPROBS: 0.75,
            phases.FORWARD_BACKWARD: 4.0,
            phases.OPTIMIZER: 0.5,
            phases.WEIGHT_SYNC: 0.5,
            phases.RECORDING: 0.0,  # the fake's callbacks take no time
            phases.OTHER: 0.375,  # _prepare_inputs' own 0.25 and the loop's 0.125
        }


def test_the_table_gives_each_phases_extra_ratio_and_both_sides_dtypes() -> None:
    def steps(generation: float, recording: float) -> list[dict[str, float]]:
        step = dict.fromkeys(phases.PHASES, 0.0)
        return [{**step, phases.GENERATION: generation, phases.RECORDING: recording}] * 3

    table = phases.phase_table(
        steps(0.2, 0.01),
        steps(0.1, 0.0),
        service_dtypes={"parameters": "float32", "autocast": "none"},
        bare_dtypes={"parameters": "float32", "autocast": "none"},
    ).splitlines()
    assert table[0].split() == [
        "phase",
        "service",
        "ms",
        "bare",
        "ms",
        "extra",
        "ms",
        "service/bare",
    ]
    rows = {line[:20].strip(): line[20:].split() for line in table[1 : len(phases.PHASES) + 2]}
    assert list(rows) == [*phases.PHASES, "step (median)"]
    assert rows[phases.GENERATION] == ["200.00", "100.00", "+100.00", "2.000"]
    assert rows[phases.RECORDING] == ["10.00", "0.00", "+10.00", "-"]  # nothing to divide by
    assert rows["step (median)"] == ["210.00", "100.00", "+110.00", "2.100"]
    assert "steps timed: service 3, bare 3" in table[-3]
    assert table[-2:] == [
        "service dtypes: parameters float32, autocast none",
        "bare dtypes: parameters float32, autocast none",
    ]


def test_a_table_without_timed_steps_says_why() -> None:
    with pytest.raises(ValueError, match="at least 2 steps"):
        phases.phase_table([], [])


def test_phase_files_are_read_back_from_a_point_in_time_on(tmp_path: Path) -> None:
    clock = phases.PhaseClock()
    clock.mark_step()
    clock.mark_step()
    trainer = FakeTrainer(FakeClock())
    trainer.args = type("Args", (), {"bf16": True, "fp16": False})()  # type: ignore[attr-defined]
    trainer.model = torch.nn.Linear(1, 1)  # type: ignore[attr-defined]
    write = phases.write_phases(tmp_path / "phases")
    write(clock, trainer)
    since = __import__("time").time_ns()
    assert phases.read_phases(tmp_path / "phases", since) == []
    write(clock, trainer)
    (found,) = phases.read_phases(tmp_path / "phases", since)
    assert found["steps"] == clock.steps
    assert found["dtypes"] == {"parameters": "float32", "autocast": "bf16"}
    assert phases.read_phases(tmp_path / "nothing-yet", 0) == []


def test_the_gpu_bench_tables_its_phases_from_the_first_timed_step() -> None:
    """bench_gpu_vllm.py cannot run without CUDA; what it does with its phases' results can."""
    import bench_gpu_vllm

    def result(generation: list[float], parameters: str) -> dict[str, Any]:
        step = dict.fromkeys(phases.PHASES, 0.0)
        return {
            "phases": [{**step, phases.GENERATION: g} for g in generation],
            "dtypes": {"parameters": parameters, "autocast": "bf16", "vllm": "bfloat16"},
        }

    # Step 2 (the clock's first entry) is still vLLM's warm-up: left out.
    assert bench_gpu_vllm.FIRST_TIMED_STEP == 3
    table = bench_gpu_vllm.phase_report(
        result([9.0, 1.0, 1.0], "float32"), result([9.0, 0.5, 0.5], "bfloat16")
    ).splitlines()
    assert table[1].split() == ["generation", "1000.00", "500.00", "+500.00", "2.000"]
    assert "steps timed: service 2, bare 2" in table[-3]
    assert table[-2] == "service dtypes: parameters float32, autocast bf16, vllm bfloat16"
    assert table[-1] == "bare dtypes: parameters bfloat16, autocast bf16, vllm bfloat16"
