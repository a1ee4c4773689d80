"""Base-model pre-flight: at job creation, refuse a base model no worker could load.

A base model is one of three things, and each is checked before a worker is spent on it:
- the built-in tiny model (``rft-tiny``);
- an absolute path on the workers: it must lie under one of ``RFT_MODEL_ROOTS`` (so a job
  cannot point at any file of the servers). The API and the workers may be different machines:
  when the path exists on the API host it must be a model directory (with ``config.json``);
  when it does not, the job is accepted with a warning event, since only the workers can tell;
- a Hugging Face hub id, which must exist on the hub (``model_info``). When the hub cannot be
  reached, ``RFT_HUB_CHECK`` decides: ``require`` (default) answers 503 saying so, ``warn``
  accepts the job with a warning event, ``off`` skips the hub check.
Anything else is a 400 that names the model.

A reward entry's model (``{"model": ...}``) is checked the same way, and more
(service.base_models.reward_models).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from service.base_models.hub import HubUnreachable, ModelNotOnHub, find_on_hub
from service.errors import BadRequest, ServiceUnavailable
from service.settings import Settings

TINY_MODEL_NAME = "rft-tiny"
# The tiny model warmed up to call a `lookup` tool, for agent jobs (tests, the README example).
TINY_TOOL_MODEL_NAME = "rft-tiny-tools"
# Built by the workers on first use, offline: nothing to check on a hub or a disk.
BUILT_IN_MODELS = frozenset({TINY_MODEL_NAME, TINY_TOOL_MODEL_NAME})
# The reward model built in the same way (service/base_models/built_in/tiny_reward_model.py):
# a reward entry's model, never a base model.
TINY_REWARD_MODEL_NAME = "rft-tiny-reward"
BUILT_IN_REWARD_MODELS = frozenset({TINY_REWARD_MODEL_NAME})
# The hub's repo id rule: an optional namespace and a name of letters, digits, '-', '_', '.'.
HUB_ID = re.compile(r"^(?:[A-Za-z0-9][\w.-]{0,95}/)?[A-Za-z0-9][\w.-]{0,95}$")


class UnknownBaseModel(BadRequest):
    pass


class HubCheckUnavailable(ServiceUnavailable):
    pass


@dataclass
class BaseModelCheck:
    """A base model that passed; ``warnings`` become events of the job."""

    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ModelField:
    """Where a checked model is named, for the messages: a job's base_model, or a reward
    entry's model (service.base_models.reward_models)."""

    label: str = "base_model"  # how messages name it
    built_in: frozenset[str] = BUILT_IN_MODELS
    error: type[BadRequest] = UnknownBaseModel


BASE_MODEL = ModelField()


def check_base_model(
    name: str, settings: Settings, where: ModelField = BASE_MODEL
) -> BaseModelCheck:
    if name in where.built_in:
        return BaseModelCheck()
    if name.startswith(("/", "~", ".")) or "\\" in name:
        return _check_local_path(name, settings, where)
    if HUB_ID.match(name) is None or ".." in name:
        raise where.error(
            f"{where.label} {name!r} is neither a built-in model "
            f"({', '.join(sorted(where.built_in))}), an absolute path under RFT_MODEL_ROOTS, "
            "nor a Hugging Face model id such as 'Qwen/Qwen2.5-0.5B-Instruct'"
        )
    return _check_hub_id(name, settings, where)


def _check_local_path(name: str, settings: Settings, where: ModelField) -> BaseModelCheck:
    roots = settings.resolved_model_roots
    if not roots:
        raise where.error(
            f"{where.label} {name!r} is a local path, and this server accepts none: an "
            "operator lists the directories models may be loaded from in RFT_MODEL_ROOTS"
        )
    path = Path(name)
    if not path.is_absolute():
        raise where.error(
            f"{where.label} {name!r}: give an absolute path under one of RFT_MODEL_ROOTS"
        )
    # resolve(): '..' and symlinks cannot lead out of a root.
    resolved = path.resolve()
    if not any(resolved.is_relative_to(root) for root in roots):
        raise where.error(
            f"{where.label} {name!r} is not under any of the allowed model roots (RFT_MODEL_ROOTS)"
        )
    if not resolved.exists():
        return BaseModelCheck(
            warnings=[
                f"{where.label} {name!r} does not exist on the API host; a worker must have "
                "it there, or the job fails when it starts"
            ]
        )
    if not (resolved / "config.json").is_file():
        raise where.error(f"{where.label} {name!r} is not a model directory: it has no config.json")
    return BaseModelCheck()


def _check_hub_id(name: str, settings: Settings, where: ModelField) -> BaseModelCheck:
    if settings.hub_check == "off":
        return BaseModelCheck()
    try:
        find_on_hub(name, endpoint=settings.hub_endpoint, timeout_s=settings.hub_check_timeout_s)
    except ModelNotOnHub as exc:
        raise where.error(
            f"{where.label} {name!r} was not found on the Hugging Face hub ({exc.endpoint}); a "
            "private model needs HF_TOKEN set on the API"
        ) from None
    except HubUnreachable as exc:
        message = (
            f"the Hugging Face hub ({exc.endpoint}) cannot be reached to check {where.label} "
            f"{name!r}: {exc.reason}"
        )
        if settings.hub_check == "warn":
            return BaseModelCheck(warnings=[f"{message}; accepted unchecked (RFT_HUB_CHECK=warn)"])
        raise HubCheckUnavailable(
            f"{message}. Retry later; an operator can accept unchecked hub ids with "
            "RFT_HUB_CHECK=warn"
        ) from None
    return BaseModelCheck()
