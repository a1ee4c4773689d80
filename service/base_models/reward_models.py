"""Reward-model pre-flight: a reward entry's ``model`` is checked as a base model is (the
built-in one, a path under RFT_MODEL_ROOTS, or a hub id that exists), and, where its
``config.json`` can be read (a path on the API host, or the hub), it must be a
sequence-classification model with one label: what the workers load it as
(AutoModelForSequenceClassification, num_labels=1) and score with (its one logit).
"""

from __future__ import annotations

from typing import Any

from service.base_models.model_config import read_model_files
from service.base_models.service import (
    BUILT_IN_MODELS,
    BUILT_IN_REWARD_MODELS,
    TINY_REWARD_MODEL_NAME,
    BaseModelCheck,
    ModelField,
    check_base_model,
)
from service.errors import BadRequest
from service.settings import Settings

CLASSIFIER_SUFFIX = "ForSequenceClassification"


class UnknownRewardModel(BadRequest):
    pass


def check_reward_model(entry: str, model: str, settings: Settings) -> BaseModelCheck:
    """400 (UnknownRewardModel) naming ``entry`` when ``model`` cannot be a reward model;
    the check's warnings otherwise (a path only the workers have, an unchecked hub id)."""
    where = ModelField(
        label=f"reward function {entry!r}: model",
        built_in=BUILT_IN_REWARD_MODELS,
        error=UnknownRewardModel,
    )
    if model in BUILT_IN_MODELS:
        raise UnknownRewardModel(
            f"{where.label} {model!r} is a built-in base model (a causal language model), not "
            f"a reward model; the built-in reward model is {TINY_REWARD_MODEL_NAME!r}"
        )
    checked = check_base_model(model, settings, where)
    if model in BUILT_IN_REWARD_MODELS:
        return checked
    files = read_model_files(model, settings)
    problem = classifier_problem(files.config) if files is not None else None
    if problem is not None:
        raise UnknownRewardModel(f"{where.label} {model!r} {problem}")
    return checked


def classifier_problem(config: dict[str, Any]) -> str | None:
    """Why a model with this config.json is no reward model, or None (as far as it tells)."""
    architectures = config.get("architectures")
    if (
        isinstance(architectures, list)
        and architectures
        and not any(str(name).endswith(CLASSIFIER_SUFFIX) for name in architectures)
    ):
        return (
            f"is not a sequence-classification model: its config.json names "
            f"{', '.join(map(str, architectures))}, and a reward model is a "
            f"*{CLASSIFIER_SUFFIX} with one label (num_labels 1)"
        )
    labels = config.get("id2label")
    count = len(labels) if isinstance(labels, dict) else config.get("num_labels")
    if isinstance(count, int) and count != 1:
        return (
            f"has {count} labels (its config.json's id2label); a reward model gives one score: "
            "num_labels 1"
        )
    return None
