"""run_grpo releases vLLM after the adapter is saved, on every path, and a failing release never
hides the run's own error.

vLLM's EngineCore.shutdown() ends in cleanup_dist_env_and_memory(), which destroys the default
process group; under TRL's colocate mode (external_launcher) that group is the trainer's, over
which FSDP and ZeRO-3 gather the adapter to save it. In server mode the release closes the
NCCL weight-sync channel of TRL's VLLMClient (close_communicator). A fake trainer records the
order of the calls (CPU, no model)."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from service.demo import demo_dataset
from service.jobs.hyperparameters import Hyperparameters
from tests.tiny import TINY_HYPERPARAMETERS
from tests.training.harness import RecordingObserver, letter_config
from workers.training import grpo
from workers.training.generation import release_vllm
from workers.training.grpo_trainer import RecordingGRPOTrainer
from workers.training.spec import TrainingSpec


class FakeEngine:
    """TRL's colocated ``vllm_generation.llm``: its engine core's shutdown is recorded."""

    def __init__(self, calls: list[str], fails: bool = False) -> None:
        def shutdown() -> None:
            calls.append("engine shutdown")
            if fails:
                raise RuntimeError("engine shutdown failed")

        self.llm_engine = SimpleNamespace(engine_core=SimpleNamespace(shutdown=shutdown))


class FakeClient:
    """TRL's VLLMClient (server mode): its weight-sync channel's closing is recorded."""

    def __init__(self, calls: list[str]) -> None:
        self.calls = calls

    def close_communicator(self) -> None:
        self.calls.append("close_communicator")


class FakeTrainer:
    def __init__(self, calls: list[str], *, train_error: BaseException | None = None) -> None:
        self.calls = calls
        self.train_error = train_error
        self.state = SimpleNamespace(global_step=3)
        self.vllm_generation = SimpleNamespace()

    def add_callback(self, callback: Any) -> None:
        pass

    def train(self, resume_from_checkpoint: str | None = None) -> None:
        self.calls.append("train")
        if self.train_error is not None:
            raise self.train_error

    def save_model(self, path: str) -> None:
        # Under FSDP and ZeRO-3 this gathers over the default process group.
        assert "engine shutdown" not in self.calls, "the engine was shut down before the save"
        self.calls.append("save")


def spec(tmp_path: Path) -> TrainingSpec:
    return TrainingSpec(
        base_model="rft-tiny",
        dataset=demo_dataset(),
        reward_config=letter_config(),
        hyperparameters=Hyperparameters.model_validate(TINY_HYPERPARAMETERS),
        output_dir=tmp_path,
        model_cache_dir=tmp_path / "models",
    )


def run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, trainer: FakeTrainer) -> Any:
    monkeypatch.setattr(grpo, "build_trainer", lambda spec, dispatcher, engines: trainer)
    monkeypatch.setattr(
        grpo, "RewardDispatcher", lambda *args, **kwargs: SimpleNamespace(load_initial=lambda: None)
    )
    return grpo.run_grpo(spec(tmp_path), sandbox=None, observer=RecordingObserver())  # type: ignore[arg-type]


def test_a_colocated_engine_is_shut_down_after_the_adapter_is_saved(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    calls: list[str] = []
    trainer = FakeTrainer(calls)
    trainer.vllm_generation.llm = FakeEngine(calls)
    outcome = run(monkeypatch, tmp_path, trainer)
    assert calls == ["train", "save", "engine shutdown"]
    assert outcome.steps_completed == 3 and outcome.adapter_path == tmp_path / "adapter"
    assert trainer.vllm_generation.llm is None


def test_the_servers_weight_sync_channel_closes_after_the_save(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    calls: list[str] = []
    trainer = FakeTrainer(calls)
    trainer.vllm_generation.vllm_client = FakeClient(calls)
    run(monkeypatch, tmp_path, trainer)
    assert calls == ["train", "save", "close_communicator"]


@pytest.mark.parametrize(
    "error",
    [RuntimeError("step 3: the sandbox died"), KeyboardInterrupt()],
    ids=["exception", "interrupt"],
)
def test_a_run_that_fails_still_closes_the_channel(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, error: BaseException
) -> None:
    """An exception (or a signal's interrupt) in training: nothing is saved, and the weight-sync
    channel is closed all the same, so the server does not keep waiting on this trainer."""
    calls: list[str] = []
    trainer = FakeTrainer(calls, train_error=error)
    trainer.vllm_generation.vllm_client = FakeClient(calls)
    with pytest.raises(type(error)):
        run(monkeypatch, tmp_path, trainer)
    assert calls == ["train", "close_communicator"]


def test_the_training_error_wins_over_a_failing_release(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    calls: list[str] = []
    trainer = FakeTrainer(calls, train_error=RuntimeError("step 3: the sandbox died"))
    trainer.vllm_generation.llm = FakeEngine(calls, fails=True)
    with (
        caplog.at_level(logging.ERROR, logger=grpo.logger.name),
        pytest.raises(RuntimeError, match="step 3: the sandbox died"),
    ):
        run(monkeypatch, tmp_path, trainer)
    assert calls == ["train", "engine shutdown"]
    # The release's own error is in the log, not the job's reason.
    assert "could not release vLLM" in caplog.text and "engine shutdown failed" in caplog.text


def test_a_release_failing_after_a_clean_run_keeps_its_outcome(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The adapter is saved by then: the job succeeded, the failed release is logged."""
    calls: list[str] = []
    trainer = FakeTrainer(calls)
    trainer.vllm_generation.llm = FakeEngine(calls, fails=True)
    with caplog.at_level(logging.ERROR, logger=grpo.logger.name):
        outcome = run(monkeypatch, tmp_path, trainer)
    assert calls == ["train", "save", "engine shutdown"] and outcome.steps_completed == 3
    assert "engine shutdown failed" in caplog.text


def test_the_channel_closes_even_when_the_engine_shutdown_fails() -> None:
    calls: list[str] = []
    vllm_generation = SimpleNamespace(llm=FakeEngine(calls, fails=True), vllm_client=None)
    vllm_generation.vllm_client = FakeClient(calls)
    with pytest.raises(RuntimeError, match="engine shutdown failed"):
        release_vllm(SimpleNamespace(vllm_generation=vllm_generation))
    assert calls == ["engine shutdown", "close_communicator"]
    # Released once: a second call does not shut a half-shut engine down again.
    release_vllm(SimpleNamespace(vllm_generation=vllm_generation))
    assert calls == ["engine shutdown", "close_communicator", "close_communicator"]


def test_reproducible_sampling_with_vllm_is_refused_before_vllm_starts() -> None:
    """Before GRPOTrainer.__init__ (which starts vLLM): no model is even looked at."""
    with pytest.raises(ValueError, match="reproducible_sampling needs transformers"):
        RecordingGRPOTrainer(
            model=None, args=SimpleNamespace(use_vllm=True), reproducible_sampling=True
        )


def test_a_shut_down_engine_leaves_no_graph_pool_for_the_next(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """vLLM's process-wide CUDA-graph pool (a class attribute of the platform) outlives the
    engine whose graphs were in it; the next engine's capture must not reopen it (PyTorch
    asserts use_count > 0). A stand-in for vllm.platforms (this environment has no vLLM; the
    GPU check runs the real sequence: tests/vllm_generation/test_vllm_engine_reuse.py)."""

    class CudaLikePlatform:
        _global_graph_pool: object | None = ("pool", 1)

    platforms = ModuleType("vllm.platforms")
    platforms.current_platform = CudaLikePlatform()  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "vllm", ModuleType("vllm"))
    monkeypatch.setitem(sys.modules, "vllm.platforms", platforms)
    calls: list[str] = []
    release_vllm(SimpleNamespace(vllm_generation=SimpleNamespace(llm=FakeEngine(calls))))
    assert calls == ["engine shutdown"]
    assert CudaLikePlatform._global_graph_pool is None
