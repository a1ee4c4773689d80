"""GRPOTrainer with the few hooks the service needs that TRL does not expose."""

from __future__ import annotations

import types
from typing import Any

import torch
from accelerate.utils import is_peft_model
from trl import GRPOTrainer
from trl.trainer.utils import add_fused_lm_head


class RecordingGRPOTrainer(GRPOTrainer):
    """Keeps each generation's advantages, truncates long prompts, and retunes sampling mid-run."""

    def __init__(self, *args: Any, max_prompt_length: int | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.max_prompt_length = max_prompt_length
        # Advantages of the latest generation batch, in the order TRL scored the samples (the
        # reward function's order). Read from the returned batch, not from TRL's completion log,
        # which is a bounded deque shared across steps.
        self.last_advantages: list[float] | None = None

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        output = super()._generate_and_score_completions(inputs)
        advantages: torch.Tensor = output["advantages"]
        # (B,) in stock GRPO; subclasses may return per-token (B, T): a sample's advantage is then
        # the same on every token, so the first one stands for it.
        if advantages.dim() > 1:
            advantages = advantages[:, 0]
        self.last_advantages = advantages.detach().float().cpu().tolist()
        return output

    def _tokenize_prompts(self, prompts: list[Any]) -> Any:
        # TRL 1.16 dropped max_prompt_length; keep the end of the prompt, where the question is.
        prompt_ids, images, multimodal_fields = super()._tokenize_prompts(prompts)
        if self.max_prompt_length is not None:
            prompt_ids = [list(ids)[-self.max_prompt_length :] for ids in prompt_ids]
        return prompt_ids, images, multimodal_fields

    def set_sampling(self, *, temperature: float | None, top_p: float | None) -> None:
        """Change sampling for the next generation.

        TRL copies temperature and top_p into several places at init (the trainer, the
        generation config and kwargs, the vLLM backend); each one is read by some path.
        """
        temperature_changed = temperature is not None and temperature != self.temperature
        updates = {"temperature": temperature, "top_p": top_p}
        for name, value in updates.items():
            if value is None:
                continue
            setattr(self, name, value)
            setattr(self.args, name, value)
            generation_config = getattr(self, "generation_config", None)
            if generation_config is not None:
                setattr(generation_config, name, value)
            generation_kwargs = getattr(self, "generation_kwargs", None)
            if isinstance(generation_kwargs, dict):
                generation_kwargs[name] = value
            vllm_generation = getattr(self, "vllm_generation", None)
            if vllm_generation is not None:
                setattr(vllm_generation, name, value)
        if temperature is not None and temperature_changed:
            self._rescale_log_probs(temperature)

    def _rescale_log_probs(self, temperature: float) -> None:
        # The loss's log-probs come from a forward that TRL patched at init with the temperature
        # baked in; they must be of the distribution we now sample from (the policy gradient, and
        # vLLM's importance-sampling ratio, compare the two). Re-patch from the unpatched forward,
        # which the patch keeps as __wrapped__.
        policy: Any = self.model
        models: list[Any] = [policy.get_base_model() if is_peft_model(policy) else policy]
        if self.ref_model is not None:
            models.append(self.ref_model)
        cast_lm_head_to_fp32 = getattr(self.args, "cast_lm_head_to_fp32", False)
        for index, model in enumerate(models):
            patched = model.__dict__.get("forward")
            unpatched = getattr(patched, "__wrapped__", None)
            if unpatched is None:
                continue
            model.forward = types.MethodType(unpatched, model)
            add_fused_lm_head(
                model,
                temperature=temperature,
                cast_lm_head_to_fp32=cast_lm_head_to_fp32,
                # The policy also feeds the entropy metric; the reference model only log-probs.
                **({"outputs": ("log_probs", "entropy")} if index == 0 else {}),
            )
