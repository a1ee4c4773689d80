"""Rewards scored by sequence-classification models, on the trainer's device.

A reward entry may name a model instead of code. Each rank loads it (the worker's own
process, not the sandbox: the weights are data, and the model runs on the rank's GPU), and
scores its own share of every generation batch the way TRL scores a reward model passed in
``reward_funcs`` (trl/trainer/grpo_trainer.py, ``GRPOTrainer._calculate_rewards``): the chat
template over prompt + completion for conversational prompts, else prompt + completion as
text; the reward model's own tokenizer, padding on the right, no special tokens added; the
first logit. Beyond TRL: the texts go through the model ``batch_size`` at a time, and
``max_length`` may keep only each text's last tokens.
"""

from __future__ import annotations

import math
import os
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from sandbox.api import FunctionResult, RewardCodeError, RewardError, RewardErrorKind
from service.base_models.built_in.tiny_reward_model import resolve_reward_model
from workers.training.cuda import usable_cuda_devices
from workers.training.step_records import RewardModelSpec

# Texts per forward pass when an entry sets no batch_size: small enough for a 7B classifier
# on long texts beside the policy, large enough that a step's batch takes few passes.
DEFAULT_BATCH_SIZE = 16


def training_device() -> torch.device:
    """The device this rank trains on, as accelerate picks it: the local rank's GPU, or CPU."""
    if usable_cuda_devices() > 0:
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device("cpu")


@dataclass
class LoadedRewardModel:
    model: Any  # a PreTrainedModel in eval mode
    tokenizer: Any


def load_reward_model(path: str, device: torch.device) -> LoadedRewardModel:
    """The model and its tokenizer as TRL prepares a reward model (num_labels 1; a pad token,
    the eos when the tokenizer has none, which the model's pooling must know), on ``device``
    in eval mode: bf16 on CUDA where supported, float32 otherwise."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    bf16 = device.type == "cuda" and torch.cuda.is_bf16_supported()
    model = AutoModelForSequenceClassification.from_pretrained(
        path, num_labels=1, dtype=torch.bfloat16 if bf16 else torch.float32
    )
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.config.get_text_config().pad_token_id = tokenizer.pad_token_id
    model.to(device)
    model.eval()
    model.requires_grad_(False)
    return LoadedRewardModel(model=model, tokenizer=tokenizer)


def reward_texts(prompts: Sequence[Any], completions: Sequence[Any], tokenizer: Any) -> list[str]:
    """What a reward model reads for each sample, as TRL builds it (``_calculate_rewards``).

    Completions come as TRL gives them (a list of messages for conversational prompts) or as
    text; a text completion of a conversational prompt becomes one assistant message.
    """
    from trl.data_utils import apply_chat_template, is_conversational

    if prompts and is_conversational({"prompt": prompts[0]}):
        return [
            apply_chat_template({"messages": prompt + _messages(completion)}, tokenizer)["text"]
            for prompt, completion in zip(prompts, completions, strict=True)
        ]
    return [
        prompt + _text(completion) for prompt, completion in zip(prompts, completions, strict=True)
    ]


def _messages(completion: Any) -> list[dict[str, Any]]:
    if isinstance(completion, str):
        return [{"role": "assistant", "content": completion}]
    return list(completion)


def _text(completion: Any) -> str:
    if isinstance(completion, str):
        return completion
    return "".join(str(message.get("content", "")) for message in completion)


class RewardModelScorer:
    """The reward models of the config in force, loaded on this rank's device.

    Models are cached by what they load: a config version that keeps a model (with a new
    weight, batch size or version of another entry) reuses it, and a model no version uses
    any more is let go when the next one loads.
    """

    def __init__(self, cache_dir: Path, device: torch.device | None = None) -> None:
        self._cache_dir = Path(cache_dir)
        self._device = device
        self._specs: list[RewardModelSpec] = []
        self._loaded: dict[str, LoadedRewardModel] = {}

    @property
    def device(self) -> torch.device:
        if self._device is None:
            self._device = training_device()
        return self._device

    @property
    def specs(self) -> list[RewardModelSpec]:
        return list(self._specs)

    def load(self, specs: Sequence[RewardModelSpec]) -> None:
        """Score the next batches with ``specs``; RewardCodeError naming the entry when a
        model cannot load (the models in force then stay)."""
        loaded: dict[str, LoadedRewardModel] = {}
        for spec in specs:
            if spec.model in loaded:
                continue
            cached = self._loaded.get(spec.model)
            if cached is None:
                cached = self._load(spec)
            loaded[spec.model] = cached
        self._loaded = loaded
        self._specs = list(specs)
        if self._device is not None and self._device.type == "cuda":
            torch.cuda.empty_cache()  # a swapped-out model's memory, back to the policy

    def _load(self, spec: RewardModelSpec) -> LoadedRewardModel:
        try:
            path = resolve_reward_model(spec.model, self._cache_dir)
            return load_reward_model(path, self.device)
        except Exception as exc:
            raise RewardCodeError(
                spec.name,
                f"reward model {spec.model!r} could not be loaded: {type(exc).__name__}: {exc}",
            ) from exc

    def score(
        self, prompts: Sequence[Any], completions: Sequence[Any]
    ) -> dict[str, FunctionResult]:
        """Each reward model's scores of the samples (TRL's prompts and completions)."""
        return {spec.name: self._score(spec, prompts, completions) for spec in self._specs}

    def _score(
        self, spec: RewardModelSpec, prompts: Sequence[Any], completions: Sequence[Any]
    ) -> FunctionResult:
        started = time.perf_counter()
        loaded = self._loaded[spec.model]
        scores: list[float | None] = [None] * len(prompts)
        errors: list[RewardError] = []
        try:
            texts = reward_texts(prompts, completions, loaded.tokenizer)
        except Exception as exc:
            # The chat template refused these messages: no sample can be scored.
            texts = []
            errors.append(_error(exc, None))
        size = spec.batch_size or DEFAULT_BATCH_SIZE
        for start in range(0, len(texts), size):
            chunk = texts[start : start + size]
            try:
                values = score_texts(loaded, chunk, max_length=spec.max_length)
            except Exception as exc:  # out of memory, a text the tokenizer cannot take
                errors += [_error(exc, start + i) for i in range(len(chunk))]
                continue
            for offset, value in enumerate(values):
                if math.isfinite(value):
                    scores[start + offset] = value
                else:
                    errors.append(
                        RewardError(
                            kind=RewardErrorKind.INVALID_RETURN,
                            message=f"the reward model scored {value}",
                            sample_index=start + offset,
                        )
                    )
        return FunctionResult(
            name=spec.name,
            version=spec.version,
            scores=scores,
            errors=errors,
            duration_s=time.perf_counter() - started,
        )


def score_texts(
    loaded: LoadedRewardModel, texts: list[str], *, max_length: int | None
) -> list[float]:
    """One forward pass over ``texts``: the first logit of each, as floats."""
    tokenizer = loaded.tokenizer
    truncate: dict[str, Any] = {}
    if max_length is not None:
        # The end of a text is what is judged (the completion), and where the model pools.
        tokenizer.truncation_side = "left"
        truncate = {"truncation": True, "max_length": max_length}
    inputs = tokenizer(
        text=texts,
        return_tensors="pt",
        padding=True,
        padding_side="right",
        add_special_tokens=False,
        **truncate,
    ).to(loaded.model.device)
    with torch.inference_mode():
        logits = loaded.model(**inputs).logits[:, 0]
    return [float(value) for value in logits.float().tolist()]


def _error(exc: Exception, sample_index: int | None) -> RewardError:
    return RewardError(
        kind=RewardErrorKind.EXCEPTION,
        message=f"{type(exc).__name__}: {exc}",
        traceback=traceback.format_exc(),
        sample_index=sample_index,
    )
