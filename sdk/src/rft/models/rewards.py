"""Reward functions, reward modules and reward models: what is sent, and how a config holds them."""

from __future__ import annotations

import os
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeAlias

from pydantic import BaseModel, Field

from rft.agents import ConfigMap
from rft.reward_source import function_reference, module_functions, module_text, to_source


class RewardFunction(BaseModel):
    """A reward function to send: Python source (or a plain function), its weight, and how it
    runs. Settings left None take the server's defaults."""

    source: str
    weight: float = 1.0
    function: str | None = Field(
        None,
        description="The def to run when source is a whole module (set for functions "
        "that use module-level names: their file is sent, the server keeps what they use).",
    )
    max_concurrency: int | None = Field(
        None, description="Samples scored at once (async or threads); 1: one after another."
    )
    sample_timeout_s: float | None = Field(None, description="Wall limit of one sample.")
    rate_limit_per_s: float | None = Field(None, description="Most calls started per second.")

    def __init__(
        self, source: str | Callable[..., Any], *, weight: float = 1.0, **extra: Any
    ) -> None:
        if callable(source) and not isinstance(source, RewardFunction):
            source, function = function_reference(source)
            if function is not None:
                extra.setdefault("function", function)
        super().__init__(source=to_source(source), weight=weight, **extra)

    def to_request(self) -> dict[str, Any]:
        return self.model_dump(
            include={"source", "weight", *RUN_SETTINGS, "function"}, exclude_none=True
        )


RUN_SETTINGS = ("max_concurrency", "sample_timeout_s", "rate_limit_per_s")


class RewardModule:
    """A whole reward file, and which of its functions are rewards::

        rft.RewardModule("rewards.py", {"correctness_reward_func": 2.0, "int_reward_func": 0.5})
        rft.RewardModule(my_rewards_module, ["strict_format_reward_func"])

    ``functions`` maps names to weights or to ``{"weight", "max_concurrency", ...}``, or lists
    names (weight 1). The server stores each function with the module-level code it uses.
    """

    def __init__(
        self,
        module: str | os.PathLike[str] | types.ModuleType,
        functions: Mapping[str, float | Mapping[str, Any]] | Sequence[str],
    ) -> None:
        self.source = module_text(module)
        self.functions = module_functions(functions)

    @classmethod
    def from_source(
        cls, source: str, functions: Mapping[str, float | Mapping[str, Any]] | Sequence[str]
    ) -> RewardModule:
        module = cls.__new__(cls)
        module.source = source
        module.functions = module_functions(functions)
        return module

    def to_request(self) -> dict[str, Any]:
        return {"source": self.source, "functions": self.functions}


class RewardModel(BaseModel):
    """A reward scored by a sequence-classification model instead of code::

        rft.RewardModel("OpenAssistant/reward-model-deberta-v3-large-v2", weight=0.5)
        rft.RewardModel("rft-tiny-reward")  # built in: prefers text written with the letter a

    ``model`` is a Hugging Face model id, an absolute path on the workers under the server's
    RFT_MODEL_ROOTS, or a built-in name; it must have one label (num_labels 1). The workers
    score with it on the training device, as TRL scores a reward model.
    """

    model: str
    weight: float = 1.0
    batch_size: int | None = Field(None, description="Texts per forward pass; None: 16.")
    max_length: int | None = Field(
        None, description="Tokens read per text (its end); None: the whole text."
    )

    def __init__(self, model: str | os.PathLike[str], *, weight: float = 1.0, **extra: Any) -> None:
        super().__init__(model=os.fspath(model), weight=weight, **extra)

    def to_request(self) -> dict[str, Any]:
        return self.model_dump(
            include={"model", "weight", *REWARD_MODEL_SETTINGS}, exclude_none=True
        )


REWARD_MODEL_SETTINGS = ("batch_size", "max_length")

RewardFunctionLike: TypeAlias = str | Callable[..., Any] | RewardFunction | RewardModel


class RewardFunctionConfig(RewardFunction):
    """A reward function as the server stores it; ``version`` is None until the server saves it."""

    version: int | None = None
    label: str | None = Field(None, description="name_vN, as shown in graphs.")

    def __init__(
        self,
        source: str | Callable[..., Any],
        *,
        weight: float = 1.0,
        version: int | None = None,
        **extra: Any,
    ) -> None:
        super().__init__(source, weight=weight, version=version, **extra)


class RewardModelConfig(RewardModel):
    """A reward model as the server stores it; ``version`` is None until the server saves it
    (a new model is a new version, a new weight is not)."""

    version: int | None = None
    label: str | None = Field(None, description="name_vN, as shown in graphs.")

    def __init__(
        self,
        model: str | os.PathLike[str],
        *,
        weight: float = 1.0,
        version: int | None = None,
        **extra: Any,
    ) -> None:
        super().__init__(model, weight=weight, version=version, **extra)


# An entry of a config's reward_functions: code, or a reward model.
RewardEntryConfig: TypeAlias = RewardFunctionConfig | RewardModelConfig


def to_reward_function_config(
    name: str, value: RewardFunctionLike | Mapping[str, Any], *, weight: float = 1.0
) -> RewardEntryConfig:
    if isinstance(value, RewardFunctionConfig | RewardModelConfig):
        return value
    if isinstance(value, RewardModel):
        return RewardModelConfig.model_validate(value.model_dump(exclude={"version", "label"}))
    if isinstance(value, Mapping) and value.get("model") is not None:
        return RewardModelConfig.model_validate(value)
    if isinstance(value, RewardFunction):
        return RewardFunctionConfig.model_validate(value.model_dump(exclude={"version", "label"}))
    if isinstance(value, Mapping):
        return RewardFunctionConfig.model_validate(value)
    if callable(value):
        source, function = function_reference(value, name=name)
        return RewardFunctionConfig(source, weight=weight, function=function)
    return RewardFunctionConfig(to_source(value, name=name), weight=weight)


RewardFunctionsInput: TypeAlias = Mapping[str, RewardFunctionLike | Mapping[str, Any]]


class RewardFunctionMap(ConfigMap[RewardEntryConfig]):
    """Reward functions (and reward models) by name; assigning a function or source string
    keeps the old weight.

    ``config.reward_functions["fmt"] = my_function`` replaces fmt's code and leaves its weight,
    ``config.reward_functions["fmt"].weight = 0.5`` changes only the weight, and
    ``config.reward_functions["judge"] = rft.RewardModel("org/other-rm", weight=2)`` swaps a
    reward model.
    """

    def __init__(self, functions: RewardFunctionsInput | None = None) -> None:
        super().__init__(functions)

    def _converted(self, name: str, value: Any) -> RewardEntryConfig:
        previous = self.get(name)
        weight = previous.weight if previous is not None else 1.0
        return to_reward_function_config(name, value, weight=weight)


def reward_functions_request(functions: RewardFunctionsInput) -> dict[str, dict[str, Any]]:
    """The JSON body part ``{name: {"source", "weight"}}`` from functions, strings or models."""
    return RewardFunctionMap(functions).to_request()
