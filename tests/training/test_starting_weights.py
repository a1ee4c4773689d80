"""init_from on the worker: a job's trainer starts from another run's adapter (and optimizer
state), its first step already generates with it, and a resume of that job continues from its
own checkpoint, not from the start."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from peft import PeftModel, get_peft_model_state_dict
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel

from sandbox.api import RewardFunctionSpec, RewardSandbox
from service.base_models.built_in.tiny_model import resolve_base_model
from workers.training.grpo import TrainingOutcome, TrainingSpec, build_trainer, run_grpo
from workers.training.reward_dispatch import RewardDispatcher
from workers.training.starting_weights import reference_in_adapter_dtype
from workers.training.step_records import RewardConfig

from .harness import RecordingObserver, one_word_answers

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


# Prompts of one length (4 tokens each): the trainer generates them in one batch with no
# padding, as the reference below generates each alone.
SAME_LENGTH_PROMPTS = ("Say yes:", "Say no:", "Say cat:", "Say dog:")
COMPLETION_LENGTH = "def length(prompt, completion, example):\n    return len(completion) / 16\n"


def greedy_completions(model: PreTrainedModel, model_path: str, limit: int) -> dict[str, str]:
    """Each prompt's greedy completion, decoded as TRL hands completions to reward functions."""
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    completions = {}
    for prompt in SAME_LENGTH_PROMPTS:
        ids = tokenizer(prompt, return_tensors="pt").input_ids
        with torch.no_grad():
            generated = model.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=limit,
                do_sample=False,
                eos_token_id=tokenizer.eos_token_id,
                pad_token_id=tokenizer.pad_token_id,
            )
        completions[prompt] = tokenizer.decode(
            generated[0, ids.shape[1] :], skip_special_tokens=True
        )
    return completions


def test_the_first_step_generates_with_the_starting_adapter(
    tmp_path: Path, model_cache_dir: Path, make_spec: SpecFactory, make_sandbox: SandboxFactory
) -> None:
    """Step 1's completions are the starting adapter's, not the base model's: the adapter is in
    the model TRL generates with before any update (with transformers generation).

    Greedy, so that each completion is exactly what the adapter alone writes. (Sampled at
    temperature 1 with the same seed, step 1 of a child often shares its first tokens with a
    run from the base model: torch draws one token as the argmax of p / exponential noise, the
    same noise in both runs, and an adapter that moves mass onto one answer leaves the ratios of
    the other tokens as they were; whenever its answer does not win, the other run's pick does.)
    """
    adapter = one_word_answers(tmp_path / "sft", model_cache_dir)
    spec = make_spec(
        dataset=[{"prompt": prompt} for prompt in SAME_LENGTH_PROMPTS],
        reward_config=RewardConfig(
            version=1, functions=[RewardFunctionSpec("length", COMPLETION_LENGTH, 1.0, 1)]
        ),
        train_steps=1,
        # Nucleus sampling this narrow keeps only the likeliest token: greedy decoding.
        top_p=1e-9,
        init_adapter=adapter,
    )
    _, observer = train(spec, make_sandbox)

    model_path = resolve_base_model("rft-tiny", model_cache_dir)
    limit = spec.hyperparameters.max_completion_length
    base = AutoModelForCausalLM.from_pretrained(model_path)
    from_base = greedy_completions(base, model_path, limit)
    with_adapter = greedy_completions(
        PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(model_path), str(adapter)),
        model_path,
        limit,
    )
    # The warm-up answers in one word; the base model does not: the two can be told apart.
    assert all(from_base[p] != with_adapter[p] for p in SAME_LENGTH_PROMPTS), (
        from_base,
        with_adapter,
    )
    [step] = observer.records
    assert step.step == 1 and len(step.completions) == spec.hyperparameters.completions_per_step
    generated = [(record.prompt, record.completion) for record in step.completions]
    assert generated == [(prompt, with_adapter[prompt]) for prompt, _ in generated]


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
