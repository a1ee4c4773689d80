"""init_from on the worker: a job's trainer starts from another run's adapter (and optimizer
state), and a resume of that job continues from its own checkpoint, not from the start."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from peft import PeftModel, get_peft_model_state_dict
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from sandbox.api import RewardSandbox
from workers.training.grpo import TrainingOutcome, TrainingSpec, build_trainer, run_grpo
from workers.training.reward_dispatch import RewardDispatcher
from workers.training.starting_weights import reference_in_adapter_dtype
from workers.training.tiny_model import resolve_base_model

from .harness import RecordingObserver

SpecFactory = Callable[..., TrainingSpec]
SandboxFactory = Callable[[], RewardSandbox]


def train(
    spec: TrainingSpec, make_sandbox: SandboxFactory, observer: RecordingObserver | None = None
) -> tuple[TrainingOutcome, RecordingObserver]:
    observer = observer or RecordingObserver()
    return run_grpo(spec, make_sandbox(), observer), observer


@pytest.fixture
def parent(make_spec: SpecFactory, make_sandbox: SandboxFactory) -> TrainingOutcome:
    """Two steps of the letter reward, checkpointed after each."""
    outcome, _ = train(make_spec(train_steps=2, checkpoint_every=1, seed=1), make_sandbox)
    return outcome


def lora_weights(spec: TrainingSpec, make_sandbox: SandboxFactory) -> dict[str, torch.Tensor]:
    """The adapter weights of ``spec``'s trainer before its first step."""
    trainer = build_trainer(
        spec, RewardDispatcher(make_sandbox(), spec.reward_config, spec.dataset, None)
    )
    return {
        name: tensor.detach().clone()
        for name, tensor in get_peft_model_state_dict(trainer.model).items()
    }


def test_the_trainer_starts_from_the_adapter_and_resumes_from_its_own_checkpoint(
    parent: TrainingOutcome, make_spec: SpecFactory, make_sandbox: SandboxFactory
) -> None:
    trained = load_file(parent.adapter_path / "adapter_model.safetensors")
    started = lora_weights(make_spec(init_adapter=parent.adapter_path), make_sandbox)
    assert started.keys() == trained.keys()
    for name, tensor in trained.items():
        assert torch.equal(started[name], tensor), name
    # What a bare start would have had instead: LoRA B is zero, the parent's is not.
    bare = lora_weights(make_spec(), make_sandbox)
    b_weights = [name for name in trained if "lora_B" in name]
    assert all(not bare[name].any() for name in b_weights)
    assert any(trained[name].any() for name in b_weights)

    # With a KL term, its reference is the starting adapter (not the base model): nothing to
    # diverge from before the first update. Stopped after step 2 and resumed: steps 3-4 as in
    # the run that never stopped (the checkpoint's weights, not the starting ones, carry on).
    child = {"train_steps": 4, "seed": 2, "beta": 0.04, "init_adapter": parent.adapter_path}
    whole, whole_steps = train(make_spec(**child), make_sandbox)
    kl = [record.kl for record in whole_steps.records]
    assert kl[0] == 0.0 and all(value is not None and value > 0 for value in kl[1:]), kl
    stopped_spec = make_spec(**child)
    train(stopped_spec, make_sandbox, RecordingObserver(stop_after=2))
    _, rest = train(
        make_spec(
            **child,
            output_dir=stopped_spec.output_dir,
            resume_from_checkpoint=stopped_spec.output_dir / "checkpoint-2",
        ),
        make_sandbox,
        RecordingObserver(first_step=3),
    )
    assert [record.step for record in rest.records] == [3, 4]
    assert rest.rewards == pytest.approx(whole_steps.rewards[2:], abs=1e-6)
    assert whole.steps_completed == 4


def test_the_optimizer_state_carries_on_from_the_checkpoint(
    parent: TrainingOutcome, make_spec: SpecFactory, make_sandbox: SandboxFactory
) -> None:
    checkpoint = parent.adapter_path.parent / "checkpoint-2"
    spec = make_spec(
        train_steps=1, learning_rate=1e-3, init_adapter=checkpoint, init_optimizer=True
    )
    train(spec, make_sandbox)
    saved = torch.load(checkpoint / "optimizer.pt", weights_only=True)
    after = torch.load(spec.output_dir / "checkpoint-1" / "optimizer.pt", weights_only=True)
    # Adam counts on from the parent's two steps; the learning rate is this job's own.
    assert {float(state["step"]) for state in saved["state"].values()} == {2.0}
    assert {float(state["step"]) for state in after["state"].values()} == {3.0}
    assert {group["lr"] for group in after["param_groups"]} == {1e-3}
    assert {group["lr"] for group in saved["param_groups"]} != {1e-3}


def test_the_kl_reference_keeps_the_dtype_of_the_adapter_it_copies(
    parent: TrainingOutcome, model_cache_dir: Path
) -> None:
    base = AutoModelForCausalLM.from_pretrained(
        resolve_base_model("rft-tiny", model_cache_dir), dtype=torch.bfloat16
    )
    # As the trainer loads it under ZeRO-3, then as TRL adds its reference copy (beta > 0).
    model = PeftModel.from_pretrained(
        base, str(parent.adapter_path), is_trainable=True, autocast_adapter_dtype=False
    )
    model.add_adapter("ref", model.peft_config["default"])

    def dtypes(adapter: str) -> set[torch.dtype]:
        return {p.dtype for name, p in model.named_parameters() if f".{adapter}." in name}

    assert (dtypes("default"), dtypes("ref")) == ({torch.bfloat16}, {torch.float32})
    reference_in_adapter_dtype(model)
    assert dtypes("ref") == {torch.bfloat16}
