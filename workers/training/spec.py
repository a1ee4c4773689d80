"""What one training run is given and what it gives back: plain data, without torch.

The worker builds a TrainingSpec and reads a TrainingOutcome, but trains in processes of its
own (workers.training.launch): keeping these here keeps torch, transformers and TRL out of the
worker's process. ``workers.training.grpo`` re-exports both.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from service.jobs.hyperparameters import Hyperparameters
from workers.training.generation import (
    Generation,
    GenerationSetupError,
    transformers_generation,
)
from workers.training.step_records import RewardConfig


@dataclass
class TrainingSpec:
    base_model: str  # a hub id, a local path, or "rft-tiny"
    # Each row has a "prompt" (a string or a list of chat messages); every other column is
    # passed to the reward functions as part of the row.
    dataset: list[dict[str, Any]]
    reward_config: RewardConfig
    hyperparameters: Hyperparameters
    output_dir: Path  # checkpoints (checkpoint-N) and the final adapter land here
    model_cache_dir: Path  # where the built-in tiny model is built
    # A checkpoint-N directory of an earlier run with the same spec: steps after N are re-run.
    resume_from_checkpoint: Path | None = None
    # The job's copy of the adapter it starts from (init_from): the LoRA weights start as
    # these, and with beta > 0 the KL term is measured against them. A resume loads its
    # checkpoint over them, so they never replace what the job has trained since.
    init_adapter: Path | None = None
    # Start the optimizer from init_adapter's optimizer.pt too (only when not resuming).
    init_optimizer: bool = False
    # How many checkpoints to keep on disk; None keeps all (the observer may have recorded them).
    keep_checkpoints: int | None = None
    # What generates completions (the worker picks it from its settings: choose_generation).
    generation: Generation = field(default_factory=transformers_generation)
    # Rows (each with a "prompt") the adapter is evaluated on, as the hyperparameters' eval_*
    # fields say; None: no evaluation.
    validation: list[dict[str, Any]] | None = None
    # "grpo", or "sft": supervised on the rows' answers (workers.training.sft; the rows are
    # examples, service.datasets.supervised, and the reward config goes unused).
    method: str = "grpo"

    def __post_init__(self) -> None:
        if not self.dataset:
            raise ValueError("dataset: no rows to train on")
        if self.method == "sft":
            return  # its rows are checked as they become examples (run_sft)
        missing = [i for i, row in enumerate(self.dataset) if "prompt" not in row]
        if missing:
            raise ValueError(f"dataset: rows {missing[:5]} have no 'prompt' column")
        config = self.reward_config
        if not (config.functions or config.reward_models or config.environments):
            # An environment may own the reward (get_reward); that is checked when it loads.
            raise ValueError("reward_config: give at least one reward function")
        if self.init_optimizer and self.init_adapter is None:
            raise ValueError("init_optimizer: the optimizer state comes with init_adapter")
        if self.validation is not None and any("prompt" not in row for row in self.validation):
            raise ValueError("validation: every row needs a 'prompt' column")
        hp = self.hyperparameters
        if len(self.dataset) < hp.prompts_per_step:
            raise ValueError(
                f"dataset: {len(self.dataset)} rows, fewer than "
                f"prompts_per_step={hp.prompts_per_step}"
            )
        if hp.reproducible_sampling and self.generation.uses_vllm:
            # vLLM samples inside its engine, where per-completion keyed noise cannot reach.
            raise GenerationSetupError(
                "reproducible_sampling needs transformers generation, and this worker generates "
                f"with {self.generation.describe()}: set RFT_GENERATION_BACKEND=transformers "
                "on the worker, or turn reproducible_sampling off"
            )


@dataclass
class TrainingOutcome:
    steps_completed: int
    stop_reason: str | None  # what should_stop() returned to end the run; None if nobody asked
    adapter_path: Path
