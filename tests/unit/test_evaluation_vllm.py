"""Validation generates with the job's colocated vLLM engine where the job does (TRL's
``vllm_generation.llm``), after syncing the adapter as it stands into it; elsewhere with
transformers. Fakes stand in for TRL's VLLMGeneration and vLLM's LLM (no vLLM in the main
environment); tests/vllm_generation runs the real thing."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from workers.training import evaluation
from workers.training.evaluation import Evaluator, ValidationSettings
from workers.training.ranks import RankGroup

GREEDY = ValidationSettings(
    every=None,
    samples_per_prompt=4,
    max_prompts=1000,
    temperature=0.0,
    max_completion_length=5,
    stop=("!",),
    seed=7,
)
SAMPLED = ValidationSettings(**{**GREEDY.__dict__, "temperature": 0.8})


class FakeLLM:
    """vLLM's LLM: writes tokens 7, 8, 9 (and "!" = 0, then 9) for every sample."""

    def __init__(self, calls: list[Any]) -> None:
        self.calls = calls

    def generate(self, prompts: list[dict[str, Any]], sampling_params: Any, use_tqdm: bool) -> Any:
        self.calls.append(("generate", [p["prompt_token_ids"] for p in prompts], sampling_params))
        return [
            SimpleNamespace(
                outputs=[
                    SimpleNamespace(token_ids=[7, 8, 0, 9]) for _ in range(sampling_params["n"])
                ]
            )
            for _ in prompts
        ]

    def wake_up(self, tags: list[str]) -> None:
        self.calls.append(("wake_up", tags))

    def sleep(self, level: int) -> None:
        self.calls.append(("sleep", level))


def trainer(
    calls: list[Any],
    *,
    global_step: int = 2,
    last_loaded_step: int = 1,
    mode: str = "colocate",
    sleep_mode: bool = False,
    fsdp: bool = False,
) -> Any:
    generation = SimpleNamespace(
        mode=mode,
        llm=FakeLLM(calls) if mode == "colocate" else None,
        enable_sleep_mode=sleep_mode,
        _llm_weights_sleeping=sleep_mode,
        tensor_parallel_size=1,
        model=None,
        sync_weights=lambda: calls.append(("sync_weights",)),
    )
    return SimpleNamespace(
        use_vllm=True,
        vllm_generation=generation,
        state=SimpleNamespace(global_step=global_step),
        _last_loaded_step=last_loaded_step,
        is_fsdp_enabled=fsdp,
        processing_class=SimpleNamespace(pad_token_id=0),
        args=SimpleNamespace(gradient_checkpointing_kwargs=None),
        model_wrapped=None,
        accelerator=None,
        _tokenize_prompts=lambda prompts: ([[ord(c) for c in prompts[0]]], None, None),
        _decode=lambda ids: "".join("!" if i == 0 else str(i) for i in ids),
    )


@pytest.fixture(autouse=True)
def sampling_params(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(evaluation, "_sampling_params", lambda **values: values)


@pytest.fixture
def no_transformers(monkeypatch: pytest.MonkeyPatch) -> None:
    @contextlib.contextmanager
    def unwrapped(*args: Any, **kwargs: Any) -> Iterator[Any]:
        raise AssertionError("transformers generated")
        yield

    monkeypatch.setattr(evaluation, "unwrap_model_for_generation", unwrapped)


def test_greedy_validation_syncs_the_adapter_then_generates_with_vllm(
    no_transformers: None,
) -> None:
    calls: list[Any] = []
    fake = trainer(calls, global_step=2, last_loaded_step=1)
    completions = Evaluator([{"prompt": "ab"}, {"prompt": "c"}], GREEDY)._generate(
        fake, ["ab", "c"], step=2
    )
    (sync, (generate, prompt_ids, params)) = calls
    assert sync == ("sync_weights",) and generate == "generate"
    assert prompt_ids == [[97, 98], [99]]
    # Greedy: one completion per prompt, no seed; stopped (and cut) at the stop string.
    assert params == {
        "n": 1,
        "temperature": 0.0,
        "top_p": 1.0,
        "max_tokens": 5,
        "stop": ["!"],
        "seed": None,
    }
    assert completions == ["78!", "78!"]
    # The next step's generation finds the weights current and does not sync again.
    assert fake._last_loaded_step == 2


def test_weights_synced_at_this_step_are_not_synced_again(no_transformers: None) -> None:
    calls: list[Any] = []
    fake = trainer(calls, global_step=3, last_loaded_step=3)
    Evaluator([{"prompt": "a"}], GREEDY)._generate(fake, ["a"], step=3)
    assert [call[0] for call in calls] == ["generate"]


def test_sampled_validation_draws_from_its_own_seeded_generators(no_transformers: None) -> None:
    calls: list[Any] = []
    completions = Evaluator([{"prompt": "a"}], SAMPLED)._generate(trainer(calls), ["a"], step=5)
    params = calls[-1][2]
    assert params["n"] == 4 and params["temperature"] == 0.8
    assert params["seed"] == SAMPLED.seed + 5  # the step's, not the engine's generator
    assert completions == ["78!"] * 4


def test_a_sleeping_engine_is_woken_for_validation_and_put_back_to_sleep(
    no_transformers: None,
) -> None:
    """Sleep mode (level 2) dropped the weights after the last generation: they are synced
    again even at the same step, and the engine sleeps again after, as TRL leaves it."""
    calls: list[Any] = []
    fake = trainer(calls, global_step=2, last_loaded_step=2, sleep_mode=True)
    Evaluator([{"prompt": "a"}], GREEDY)._generate(fake, ["a"], step=2)
    assert [call[0] for call in calls] == ["sync_weights", "wake_up", "generate", "sleep"]
    assert calls[1] == ("wake_up", ["kv_cache"]) and calls[3] == ("sleep", 2)
    assert fake.vllm_generation._llm_weights_sleeping is True


class AloneInAGroup(RankGroup):
    def gather(self, value: Any) -> list[Any]:
        return [value]


def test_under_fsdp_a_rank_without_prompts_syncs_but_makes_no_filler_call(
    no_transformers: None,
) -> None:
    """The sync gathers the shards (a collective every rank joins); vLLM's generation is the
    rank's own, so no rank waits on another's generate() calls."""
    calls: list[Any] = []
    evaluator = Evaluator([{"prompt": "only"}], GREEDY)
    dispatcher = SimpleNamespace(
        config=SimpleNamespace(functions=[], version=1),
        sandbox=None,
        agents=None,  # not an agent job
        reward_sources=lambda: [],
    )
    record = evaluator.evaluate(
        trainer(calls, fsdp=True),
        dispatcher,  # type: ignore[arg-type]
        step=2,
        ranks=AloneInAGroup(rank=0, world_size=2),
    )
    assert calls == [("sync_weights",)]
    assert record.samples == 0 and record.prompts == 1


class OneTokenModel(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))

    def generate(self, input_ids: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        return torch.cat([input_ids, torch.full((len(input_ids), 1), 5)], dim=1)


@pytest.mark.parametrize("mode", ["server", "released"])
def test_without_a_colocated_engine_transformers_generates(
    monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    model = OneTokenModel()

    @contextlib.contextmanager
    def unwrapped(*args: Any, **kwargs: Any) -> Iterator[Any]:
        yield model

    monkeypatch.setattr(evaluation, "unwrap_model_for_generation", unwrapped)
    calls: list[Any] = []
    fake = trainer(calls, mode="server" if mode == "server" else "colocate")
    if mode == "released":
        fake.vllm_generation.llm = None
    completions = Evaluator([{"prompt": "a"}], GREEDY)._generate(fake, ["a"], step=2)
    assert completions == ["5"] and calls == []
