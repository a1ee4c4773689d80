"""Real GRPO runs (TRL, PEFT, the tiny model) end to end through run_grpo."""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from pathlib import Path

import pytest

from sandbox.api import RewardFunctionSpec, RewardSandbox
from service.demo import demo_dataset, demo_reward_functions, demo_rewards_source
from service.demo.rewards import brevity, letter_fraction
from service.jobs.guard_settings import GuardSettings
from service.jobs.hyperparameters import Hyperparameters
from tests.tiny import TINY_HYPERPARAMETERS
from workers.guards import guard_trips
from workers.training.grpo import TrainingOutcome, TrainingSpec, run_grpo
from workers.training.step_records import RewardConfig

from .harness import RecordingObserver, letter_config, reward_sandbox

SpecFactory = Callable[..., TrainingSpec]
SandboxFactory = Callable[[], RewardSandbox]
DemoRun = tuple[TrainingSpec, TrainingOutcome, RecordingObserver]


def train(
    spec: TrainingSpec, make_sandbox: SandboxFactory, observer: RecordingObserver | None = None
) -> tuple[TrainingOutcome, RecordingObserver]:
    observer = observer or RecordingObserver()
    outcome = run_grpo(spec, make_sandbox(), observer)
    return outcome, observer


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory, model_cache_dir: Path) -> DemoRun:
    """The demo job: 20 steps of both demo functions, checkpoints every 8 steps."""
    spec = TrainingSpec(
        base_model="rft-tiny",
        dataset=demo_dataset(),
        reward_config=RewardConfig(version=1, functions=demo_reward_functions()),
        hyperparameters=Hyperparameters.model_validate(
            {**TINY_HYPERPARAMETERS, "train_steps": 20, "checkpoint_every": 8, "seed": 0}
        ),
        output_dir=tmp_path_factory.mktemp("demo-run"),
        model_cache_dir=model_cache_dir,
    )
    sandbox = reward_sandbox()
    observer = RecordingObserver()
    try:
        outcome = run_grpo(spec, sandbox, observer)
    finally:
        sandbox.close()
    return spec, outcome, observer


# How much the mean of the last 5 steps must exceed the first 5's. Measured over 20 steps of the
# demo job: learning (seeds 0-2) +0.11 to +0.24 letter_fraction (and reward); the same job not
# learning (learning rate 1e-12, seeds 0-3) +0.0004 to +0.011, by chance alone: it passed
# `last > first` every time. A step's mean varies by ~0.015 without learning.
LEARNED_MARGIN = 0.05


def test_demo_reward_rises(demo_run: DemoRun) -> None:
    _, outcome, observer = demo_run
    letter = [r.functions["letter_fraction"].mean for r in observer.records]
    assert all(value is not None for value in letter)
    first, last = statistics.fmean(letter[:5]), statistics.fmean(letter[-5:])  # type: ignore[arg-type]
    assert last > first + LEARNED_MARGIN, letter
    rewards = observer.rewards
    first_reward = statistics.fmean(rewards[:5])  # type: ignore[arg-type]
    assert statistics.fmean(rewards[-5:]) > first_reward + LEARNED_MARGIN, rewards  # type: ignore[arg-type]
    assert outcome.stop_reason is None


def test_the_demo_job_trips_no_guard(demo_run: DemoRun) -> None:
    """The demo's rewards are not gamed within its run: the guards' defaults stay quiet (its
    letter_fraction carries most of the reward by its weights from the first step, and its
    completions neither drift to the limit nor repeat words)."""
    spec, _, observer = demo_run
    trips = guard_trips(
        observer.records,
        GuardSettings(),
        max_completion_length=spec.hyperparameters.max_completion_length,
    )
    assert trips == [], [(t.kind, t.step, t.message) for t in trips]


def test_demo_run_records_every_step_and_completion(
    demo_run: DemoRun,
) -> None:
    spec, outcome, observer = demo_run
    hp = spec.hyperparameters
    assert outcome.steps_completed == hp.train_steps
    assert [r.step for r in observer.records] == list(range(1, hp.train_steps + 1))
    for record in observer.records:
        assert record.config_version == 1
        assert record.learning_rate == pytest.approx(hp.learning_rate)
        assert record.loss is not None
        assert record.kl is None  # beta 0: no reference model, no KL
        assert record.duration_s > 0
        assert len(record.completions) == hp.completions_per_step
        assert set(record.function_results) == {"letter_fraction", "brevity"}
        assert "entropy" in record.extra_metrics

        positions = [(c.prompt_index, c.group_position) for c in record.completions]
        assert positions == [
            (p, g) for p in range(hp.prompts_per_step) for g in range(hp.num_generations)
        ]
        for prompt_index in range(hp.prompts_per_step):
            group = record.completions[
                prompt_index * hp.num_generations : (prompt_index + 1) * hp.num_generations
            ]
            # One prompt per group, the dataset row it came from.
            assert len({c.dataset_index for c in group}) == 1
            row = spec.dataset[group[0].dataset_index]  # type: ignore[index]
            assert all(c.prompt == row["prompt"] for c in group)
            # GRPO advantages are normalized within the group: they sum to ~0.
            advantages = [c.advantage for c in group]
            assert all(a is not None for a in advantages)
            assert sum(advantages) == pytest.approx(0.0, abs=1e-3)  # type: ignore[arg-type]
            totals = [c.total for c in group]
            if len(set(totals)) > 1:
                best = max(range(len(group)), key=lambda i: totals[i])  # type: ignore[arg-type, return-value]
                assert advantages[best] == max(advantages)  # type: ignore[type-var]

        for completion in record.completions:
            assert 1 <= completion.token_count <= hp.max_completion_length


def test_demo_run_stores_what_the_functions_return(
    demo_run: DemoRun,
) -> None:
    spec, _, observer = demo_run
    weights = {f.name: f.weight for f in spec.reward_config.functions}
    for record in observer.records:
        for completion in record.completions:
            example = spec.dataset[completion.dataset_index]  # type: ignore[index]
            expected = {
                "letter_fraction": letter_fraction(
                    completion.prompt, completion.completion, example
                ),
                "brevity": brevity(completion.prompt, completion.completion, example),
            }
            assert completion.scores == pytest.approx(expected)
            assert completion.total == pytest.approx(
                sum(weights[name] * score for name, score in expected.items())
            )
        letters = [c.scores["letter_fraction"] or 0.0 for c in record.completions]
        metrics = record.functions["letter_fraction"]
        assert metrics.mean == pytest.approx(statistics.fmean(letters))
        assert metrics.std == pytest.approx(statistics.stdev(letters))
        assert (metrics.scored, metrics.errors, metrics.weight) == (len(letters), 0, 1.0)
        assert record.reward_mean == pytest.approx(
            statistics.fmean(c.total for c in record.completions)  # type: ignore[misc]
        )


def test_demo_run_checkpoints_and_saves_the_adapter(
    demo_run: DemoRun,
) -> None:
    spec, outcome, observer = demo_run
    assert [step for step, _ in observer.checkpoints] == [8, 16, 20]
    for step, path in observer.checkpoints:
        assert path == spec.output_dir / f"checkpoint-{step}"
        assert (path / "adapter_model.safetensors").is_file()
        assert (path / "optimizer.pt").is_file()
        assert (path / "trainer_state.json").is_file()
    assert outcome.adapter_path == spec.output_dir / "adapter"
    assert (outcome.adapter_path / "adapter_config.json").is_file()
    assert (outcome.adapter_path / "adapter_model.safetensors").is_file()


def test_same_seed_same_rewards_and_resume_repeats_them(
    make_spec: SpecFactory, make_sandbox: SandboxFactory
) -> None:
    _, first = train(make_spec(train_steps=8, seed=3), make_sandbox)
    _, second = train(make_spec(train_steps=8, seed=3), make_sandbox)
    assert first.rewards == second.rewards
    assert [r.completions[0].completion for r in first.records] == [
        r.completions[0].completion for r in second.records
    ]

    # Stopped after step 3: the stop request itself saves a checkpoint to resume from.
    stopped_spec = make_spec(train_steps=8, seed=3)
    stopped, observer = train(stopped_spec, make_sandbox, RecordingObserver(stop_after=3))
    assert stopped.steps_completed == 3
    assert stopped.stop_reason == "cancelled by test"
    assert [r.step for r in observer.records] == [1, 2, 3]
    assert observer.checkpoints == [(3, stopped_spec.output_dir / "checkpoint-3")]

    resumed, rest = train(
        make_spec(
            train_steps=8,
            seed=3,
            output_dir=stopped_spec.output_dir,
            resume_from_checkpoint=stopped_spec.output_dir / "checkpoint-3",
        ),
        make_sandbox,
        RecordingObserver(first_step=4),
    )
    assert resumed.steps_completed == 8
    assert [r.step for r in rest.records] == [4, 5, 6, 7, 8]
    assert rest.rewards == pytest.approx(first.rewards[3:], abs=1e-6)


def test_config_update_applies_from_its_step_on(
    make_spec: SpecFactory, make_sandbox: SandboxFactory
) -> None:
    source = demo_rewards_source()
    update = RewardConfig(
        version=2,
        functions=[
            RewardFunctionSpec("letter_fraction", source, weight=0.5, version=2),
            RewardFunctionSpec("brevity", source, weight=1.0, version=1),
        ],
        temperature=0.7,
    )
    observer = RecordingObserver(config_updates={4: update})
    outcome, _ = train(make_spec(train_steps=7), make_sandbox, observer)

    assert outcome.steps_completed == 7
    assert [r.config_version for r in observer.records] == [1, 1, 1, 2, 2, 2, 2]
    assert observer.polled_versions == [1, 1, 1, 1, 2, 2, 2]
    for record in observer.records:
        names = {
            f.name for f in (letter_config() if record.config_version == 1 else update).functions
        }
        assert set(record.functions) == names
        assert set(record.function_results) == names
        for completion in record.completions:
            assert set(completion.scores) == names
        if record.config_version == 2:
            assert record.functions["letter_fraction"].version == 2
            assert record.functions["letter_fraction"].weight == 0.5
            for completion in record.completions:
                assert completion.total == pytest.approx(
                    0.5 * completion.scores["letter_fraction"]  # type: ignore[operator]
                    + completion.scores["brevity"]
                )


def test_a_config_the_worker_cannot_load_is_rejected_and_training_goes_on(
    make_spec: SpecFactory, make_sandbox: SandboxFactory
) -> None:
    broken = RewardConfig(
        version=2,
        functions=[
            RewardFunctionSpec(
                "letter_fraction",
                "import not_installed_here\ndef letter_fraction(p, c, e):\n    return 1.0\n",
                version=2,
            )
        ],
    )
    observer = RecordingObserver(config_updates={3: broken})
    outcome, _ = train(make_spec(train_steps=5), make_sandbox, observer)
    assert outcome.steps_completed == 5
    assert [r.config_version for r in observer.records] == [1, 1, 1, 1, 1]
    assert len(observer.rejected_configs) == 1
    version, message = observer.rejected_configs[0]
    assert version == 2 and "not_installed_here" in message


def test_unscorable_samples_get_no_total_and_zero_advantage(
    make_spec: SpecFactory, make_sandbox: SandboxFactory
) -> None:
    source = """
def flaky(prompt, completion, example):
    if "a" not in completion:
        raise ValueError("no letter a")
    return completion.count("a") / len(completion)
"""
    config = RewardConfig(version=1, functions=[RewardFunctionSpec("flaky", source)])
    outcome, observer = train(make_spec(train_steps=3, reward_config=config), make_sandbox)
    assert outcome.steps_completed == 3
    failed = [c for r in observer.records for c in r.completions if c.scores["flaky"] is None]
    assert failed, "expected some completions without the letter a"
    assert all(c.total is None and c.advantage == 0.0 for c in failed)
    for record in observer.records:
        metrics = record.functions["flaky"]
        none_count = sum(c.scores["flaky"] is None for c in record.completions)
        assert metrics.errors == none_count
        assert metrics.scored == len(record.completions) - none_count
        assert len(record.function_results["flaky"].errors) == none_count


def test_conversational_prompts(make_spec: SpecFactory, make_sandbox: SandboxFactory) -> None:
    dataset = [
        {"prompt": [{"role": "user", "content": row["prompt"]}], "target_letter": "a"}
        for row in demo_dataset()[:8]
    ]
    outcome, observer = train(
        make_spec(train_steps=2, dataset=dataset, max_prompt_length=8), make_sandbox
    )
    assert outcome.steps_completed == 2
    for record in observer.records:
        for completion in record.completions:
            assert isinstance(completion.completion, str)
            assert completion.prompt == dataset[completion.dataset_index]["prompt"]  # type: ignore[index]
            assert completion.scores["letter_fraction"] == pytest.approx(
                letter_fraction(completion.prompt, completion.completion, {"target_letter": "a"})
            )


def test_reward_functions_get_each_row_as_uploaded(
    make_spec: SpecFactory, make_sandbox: SandboxFactory
) -> None:
    """Rows need not share columns or types: each example is its own row, nothing padded."""
    dataset: list[dict[str, object]] = [
        {"prompt": "Say a:", "answer": 1},
        {"prompt": "Say b:", "answer": "two", "only_here": True},
        {"prompt": "Say c:", "answer": {"nested": [1, 2]}},
        {"prompt": "Say d:"},
    ]
    source = """
import json
def row_echo(prompt, completion, example):
    return float(len(json.dumps(example, sort_keys=True)))
"""
    config = RewardConfig(version=1, functions=[RewardFunctionSpec("row_echo", source)])
    outcome, observer = train(
        make_spec(train_steps=2, dataset=dataset, reward_config=config, prompts_per_step=4),
        make_sandbox,
    )
    assert outcome.steps_completed == 2
    for record in observer.records:
        for completion in record.completions:
            row = dataset[completion.dataset_index]  # type: ignore[index]
            assert completion.scores["row_echo"] == len(json.dumps(row, sort_keys=True))
