"""run_grpo with vLLM generating: the LoRA weights reach vLLM at every step.

TRL compares, token by token, the log-probability vLLM sampled each completion token with and
the one the trainer computes for it (`sampling/sampling_logp_difference/mean`, logged only when
vLLM generates). With weights synced they differ by bf16 noise; if vLLM kept the base model's
weights they drift apart as soon as training moves the policy. The control run shows that with
these settings the gap without sync is far above the bound.

Validation generates with the same engine, after the same sync.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from service.demo import demo_dataset
from service.jobs.hyperparameters import Hyperparameters
from tests.tiny import TINY_HYPERPARAMETERS
from tests.training.harness import RecordingObserver, letter_config, reward_sandbox
from tests.vllm_generation.conftest import MODEL_CACHE_DIR
from workers.training.generation import DEFAULT_MEMORY_FRACTION, Generation
from workers.training.grpo import TrainingSpec, run_grpo
from workers.training.kept_engine import EngineKeeper

pytestmark = pytest.mark.vllm

LOGP_GAP = "sampling/sampling_logp_difference/mean"
# The gap is TRL's mean over tokens of |log p(vLLM) - log p(trainer)|, so with synced weights it
# is rounding. vLLM runs the tiny model in bf16 on CPU and GPU alike (it casts a float32
# checkpoint down); the trainer runs in float32 on CPU, and in bf16 on a GPU that has it (grpo.py,
# bf16 "auto"). bf16 keeps 8 significant bits: one rounding moves a value by up to 2^-8 (0.4%)
# of itself, and the tiny model's logits reach |z| ~ 4, so rounding the logits alone moves a
# log-prob by up to ~0.015-0.03.
# - CPU (one side in bf16), measured: <= 0.007 with sync (the same weights' log-probs in float32
#   and in bf16 differ by 0.0075 per token on average, 0.035 at most); the bound leaves 7x.
# - GPU in bf16 (both sides round, with different kernels, so their errors add rather than
#   cancel): at most the sum of two such errors, ~0.015; the bound doubles with it, keeping
#   the same 7x margin. (Not measured here: no GPU.)
# Without sync the gap is the policy moving, not rounding, the same on either device: measured
# >= 0.38 from step 2, above STALE_GAP_FLOOR.
TRAINER_IN_BF16 = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
SYNCED_GAP_BOUND = 0.1 if TRAINER_IN_BF16 else 0.05
STALE_GAP_FLOOR = 0.2
assert STALE_GAP_FLOOR >= 2 * SYNCED_GAP_BOUND  # the control shows the bound tells them apart


def vllm_generation() -> Generation:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    return Generation(
        backend="vllm",
        device=device,
        mode="colocate",
        memory_fraction=DEFAULT_MEMORY_FRACTION[device],
    )


def train(
    output_dir: Path,
    train_steps: int,
    observer: RecordingObserver | None = None,
    validation: list[dict[str, Any]] | None = None,
    engines: EngineKeeper | None = None,
    **hyperparameters: Any,
) -> RecordingObserver:
    spec = TrainingSpec(
        base_model="rft-tiny",
        dataset=demo_dataset(),
        reward_config=letter_config(),
        hyperparameters=Hyperparameters.model_validate(
            {**TINY_HYPERPARAMETERS, "train_steps": train_steps, "seed": 0, **hyperparameters}
        ),
        output_dir=output_dir,
        model_cache_dir=MODEL_CACHE_DIR,
        generation=vllm_generation(),
        validation=validation,
    )
    observer = observer or RecordingObserver()
    sandbox = reward_sandbox()
    try:
        run_grpo(spec, sandbox, observer, engines=engines)
    finally:
        sandbox.close()
    return observer


@pytest.fixture
def without_weight_sync(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    from trl.generation.vllm_generation import VLLMGeneration

    monkeypatch.setattr(VLLMGeneration, "sync_weights", lambda self: None)
    yield


def test_vllm_generates_with_the_trained_weights(tmp_path: Path) -> None:
    observer = train(tmp_path / "synced", train_steps=5)
    gaps = [record.extra_metrics.get(LOGP_GAP) for record in observer.records]
    assert len(gaps) == 5 and None not in gaps, "no vLLM sampling metrics: vLLM did not generate"
    assert max(gaps) < SYNCED_GAP_BOUND, gaps  # type: ignore[type-var]


def test_control_without_weight_sync_the_gap_shows(
    tmp_path: Path, without_weight_sync: None
) -> None:
    observer = train(tmp_path / "stale", train_steps=3)
    gaps = [record.extra_metrics[LOGP_GAP] for record in observer.records]
    # Step 1 generates with the base weights either way; the policy then moves without vLLM.
    assert gaps[0] < SYNCED_GAP_BOUND
    assert max(gaps[1:]) > STALE_GAP_FLOOR, gaps


def test_micro_batched_steps_generate_once_each_with_the_trained_weights(tmp_path: Path) -> None:
    # 16 completions a step, backward in 4 micro-batches: vLLM still generates once per step,
    # with the weights of the step before.
    observer = train(tmp_path / "micro", train_steps=3, micro_batch_size=4)
    assert [record.step for record in observer.records] == [1, 2, 3]
    completions = TINY_HYPERPARAMETERS["prompts_per_step"] * TINY_HYPERPARAMETERS["num_generations"]
    assert all(len(record.completions) == completions for record in observer.records)
    gaps = [record.extra_metrics[LOGP_GAP] for record in observer.records]
    assert max(gaps) < SYNCED_GAP_BOUND, gaps


def test_a_live_temperature_change_reaches_vllm(tmp_path: Path) -> None:
    # The trainer's log-probs switch to the new temperature at step 3; if vLLM kept sampling at
    # the old one, the gap between the two would be far above bf16 noise.
    observer = RecordingObserver(config_updates={3: letter_config(version=2, temperature=0.3)})
    train(tmp_path / "temperature", train_steps=4, observer=observer)
    assert [record.config_version for record in observer.records] == [1, 1, 2, 2]
    gaps = [record.extra_metrics[LOGP_GAP] for record in observer.records]
    assert max(gaps) < SYNCED_GAP_BOUND, gaps


def test_validation_generates_with_vllm_after_syncing_the_trained_weights(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Each evaluation's generation goes through the colocated engine (greedy: temperature 0,
    while training samples), right after a sync of the weights as they stand after the step;
    the next step's generation then finds them current and does not sync again."""
    from trl.generation.vllm_generation import VLLMGeneration
    from vllm import LLM

    calls: list[str] = []
    sync_weights = VLLMGeneration.sync_weights
    generate = LLM.generate

    def recorded_sync(self: VLLMGeneration) -> None:
        calls.append("sync")
        sync_weights(self)

    def recorded_generate(self: LLM, prompts: Any, sampling_params: Any, **kwargs: Any) -> Any:
        calls.append("eval" if sampling_params.temperature == 0 else "train")
        return generate(self, prompts, sampling_params=sampling_params, **kwargs)

    monkeypatch.setattr(VLLMGeneration, "sync_weights", recorded_sync)
    monkeypatch.setattr(LLM, "generate", recorded_generate)
    caplog.set_level(logging.INFO, logger="workers.training.evaluation")
    validation = [{"prompt": f"Write {w}:"} for w in ("apple", "banana", "cherry")]
    observer = train(tmp_path / "validated", train_steps=3, validation=validation, eval_every=1)

    assert calls == ["sync", "train"] + ["sync", "eval", "train"] * 2 + ["sync", "eval"], calls
    evaluations = [record.evaluation for record in observer.records]
    assert [e.step if e else None for e in evaluations] == [1, 2, 3]
    assert all(e is not None and (e.prompts, e.samples) == (3, 3) for e in evaluations)
    generated_by = re.findall(r"step (\d): validation reward .* generated by (.+) \(", caplog.text)
    assert generated_by == [(str(step), "vllm (colocate)") for step in (1, 2, 3)], caplog.text
