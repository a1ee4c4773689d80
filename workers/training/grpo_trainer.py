"""GRPOTrainer with the few hooks the service needs that TRL does not expose."""

from __future__ import annotations

import inspect
import sys
import types
from collections.abc import Sequence
from typing import Any

import torch
from accelerate.utils import is_peft_model
from transformers import GenerationConfig, LogitsProcessorList
from trl import GRPOTrainer
from trl.models import unwrap_model_for_generation
from trl.trainer.utils import add_fused_lm_head, pad

from workers.training.agents.session import AgentSession
from workers.training.reproducible_sampling import KeyedGumbelSampling, sampling_warpers
from workers.training.stop_sequences import stop_length


class RecordingGRPOTrainer(GRPOTrainer):
    """Keeps each generation's advantages, truncates long prompts, ends completions at stop
    sequences, and retunes sampling mid-run."""

    def __init__(
        self,
        *args: Any,
        max_prompt_length: int | None = None,
        stop_sequences: Sequence[str] = (),
        mask_truncated_completions: bool = False,
        reproducible_sampling: bool = False,
        agent_session: AgentSession | None = None,
        **kwargs: Any,
    ) -> None:
        config = kwargs.get("args", args[2] if len(args) > 2 else None)
        if reproducible_sampling and getattr(config, "use_vllm", False):
            # Refused before TRL starts vLLM: an error after it would leave an engine (or a
            # server's weight-sync channel) that no one shuts down.
            raise ValueError("reproducible_sampling needs transformers generation, not vLLM")
        if agent_session is not None:
            kwargs["tools"] = list(agent_session.tools)
            kwargs["environment_factory"] = agent_session.environment_factory
        super().__init__(*args, **kwargs)
        # The job's tools and environments: stand-ins whose calls run in the job's sandbox.
        self.agent_session = agent_session
        # Each completion's sampling noise keyed by (seed, step, its index in the step's global
        # batch): the same completions on 1 or N ranks (workers.training.reproducible_sampling).
        self.reproducible_sampling = reproducible_sampling
        self.max_prompt_length = max_prompt_length
        self.stop_sequences = list(stop_sequences)
        # TRL calls a completion truncated when its last token is not EOS, which a completion
        # ended by a stop sequence is too: with stop sequences we mask truncated ones ourselves
        # (run_grpo then leaves TRL's mask_truncated_completions off).
        self.mask_truncated_after_stop = mask_truncated_completions and bool(stop_sequences)
        # Per completion of the latest generation, on this process: did it end by itself?
        self._finished: list[bool] = []
        if self.stop_sequences and self.use_vllm:
            # vLLM stops at the strings itself (SamplingParams.stop, in colocate and server
            # mode alike), so it generates nothing past them; the cut below finds that end.
            self.vllm_generation.generation_kwargs["stop"] = list(self.stop_sequences)
        # Advantages of the latest generation batch, in the order TRL scored the samples (the
        # reward function's order). Read from the returned batch, not from TRL's completion log,
        # which is a bounded deque shared across steps.
        self.last_advantages: list[float] | None = None

    def _generate_single_turn(
        self, prompt_ids: list[list[int]], *args: Any, **kwargs: Any
    ) -> tuple[list[list[int]], Any]:
        if self.reproducible_sampling:
            completion_ids, logprobs = self._generate_keyed(prompt_ids)
        else:
            completion_ids, logprobs = super()._generate_single_turn(prompt_ids, *args, **kwargs)
        if not self.stop_sequences:
            return completion_ids, logprobs
        ends = {*self.eos_token_ids, self._tokenizer.pad_token_id}
        self._finished = []
        for index, ids in enumerate(completion_ids):
            keep = stop_length(ids, self._decode, self.stop_sequences)
            if keep is not None:
                completion_ids[index] = list(ids[:keep])
                if logprobs is not None:
                    logprobs[index] = logprobs[index][:keep]
            self._finished.append(keep is not None or (len(ids) > 0 and ids[-1] in ends))
        return completion_ids, logprobs

    def _generate_keyed(self, prompt_ids: list[list[int]]) -> tuple[list[list[int]], None]:
        """TRL's plain ``generate()`` path (text prompts), sampling with noise keyed per
        completion: greedy decoding over filtered logits plus Gumbel noise (KeyedGumbelSampling).

        TRL's own call cannot take a logits processor, hence this copy of it."""
        device = self.accelerator.device
        # GRPOConfig's fields, typed loosely by transformers' TrainingArguments.
        args: Any = self.args
        pad_to_multiple_of: Any = self.pad_to_multiple_of
        prompts = [torch.tensor(ids) for ids in prompt_ids]
        input_ids = pad(
            prompts,
            padding_value=self._tokenizer.pad_token_id,
            padding_side="left",
            pad_to_multiple_of=pad_to_multiple_of,
        ).to(device)
        attention_mask = pad(
            [torch.ones_like(ids) for ids in prompts],
            padding_value=0,
            padding_side="left",
            pad_to_multiple_of=pad_to_multiple_of,
        ).to(device)
        # The ranks hold consecutive slices of the step's batch, in rank order (TRL slices the
        # gathered advantages the same way), so this rank's first row is number rank x rows.
        first = self.accelerator.process_index * len(prompt_ids)
        sampling = KeyedGumbelSampling(
            seed=args.seed,
            step=self.state.global_step,
            sample_indices=torch.arange(first, first + len(prompt_ids), device=device),
            prompt_length=input_ids.shape[1],
            warpers=sampling_warpers(
                temperature=self.temperature, top_k=self.top_k, top_p=self.top_p, min_p=self.min_p
            ),
        )
        greedy = {
            **self.generation_kwargs,
            "do_sample": False,
            **dict.fromkeys(("temperature", "top_p", "top_k", "min_p")),
        }
        with (
            unwrap_model_for_generation(
                self.model_wrapped,
                self.accelerator,
                gather_deepspeed3_params=args.ds3_gather_for_generation,
                generation_kwargs=greedy,
                gradient_checkpointing_kwargs=args.gradient_checkpointing_kwargs,
            ) as unwrapped_model,
            torch.no_grad(),
            self._dist.summon_full_params(self.model_wrapped, recurse=False),
        ):
            generated = unwrapped_model.generate(
                input_ids=input_ids,
                attention_mask=attention_mask,
                generation_config=GenerationConfig(**greedy, disable_compile=True),
                logits_processor=LogitsProcessorList([sampling]),
            )
        completion_ids: list[list[int]] = []
        for row in generated[:, input_ids.shape[1] :].tolist():
            # Up to and including the first end-of-sequence token, as TRL keeps it.
            end = next((i for i, token in enumerate(row) if token in self.eos_token_ids), None)
            completion_ids.append(row if end is None else row[: end + 1])
        return completion_ids, None

    def _generate(self, prompts: list[Any]) -> Any:
        output = super()._generate(prompts)
        if self.agent_session is not None:
            _, completion_ids, tool_mask, completions, *_ = output
            self.agent_session.end_generation(
                completions, completion_ids, tool_mask, self.max_completion_length or sys.maxsize
            )
        return output

    def _tool_call_loop(
        self, prompts: Any, prompt_ids: Any, completion_ids: Any, completions: Any, *args: Any
    ) -> Any:
        if self.agent_session is not None:
            # TRL appends each round's messages to these lists: the session reads every call of
            # a round from them and runs the round's calls at once.
            self.agent_session.begin_tool_loop(completions, self._sync_tool_dicts)
        return super()._tool_call_loop(prompts, prompt_ids, completion_ids, completions, *args)

    def use_agent_code(self) -> None:
        """Expose the session's current tools and environments from the next generation on
        (after a live config update). TRL reads them from these attributes at batch time; it
        derives them once at init, so this redoes that derivation for our stand-ins."""
        session = self.agent_session
        if session is None:
            return
        standalone = list(session.tools)
        self._standalone_tools = standalone
        factory = session.environment_factory
        if factory is None:
            self.environment_factories = None
            self.tools = standalone
            return
        self._multi_environment = isinstance(factory, dict)
        factories: dict[Any, Any] = factory if isinstance(factory, dict) else {None: factory}
        self.environment_factories = factories
        self._env_tools = {}
        self._environment_pool = {}
        self.tools = list(standalone)
        for name, make in factories.items():
            instance = make()
            methods = [
                getattr(instance, member)
                for member, _ in inspect.getmembers(type(instance), predicate=inspect.isfunction)
                if member not in ("reset", "get_reward") and not member.startswith("_")
            ]
            self._env_tools[name] = standalone + methods
            self._environment_pool[name] = [instance]
            self.tools += methods

    def _decode(self, token_ids: Sequence[int]) -> str:
        # As TRL decodes completions for the reward functions.
        return str(self._tokenizer.decode(list(token_ids), skip_special_tokens=True))

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        output = super()._generate_and_score_completions(inputs)
        if self.mask_truncated_after_stop:
            # What TRL's mask_truncated_completions does, with stop sequences counted as ends:
            # a truncated completion keeps its advantage but none of its tokens enter the loss.
            mask: torch.Tensor = output["completion_mask"]
            finished = torch.tensor(self._finished, device=mask.device, dtype=mask.dtype)
            output["completion_mask"] = mask * finished.unsqueeze(1)
            output["num_items_in_batch"] = self.accelerator.gather(
                output["completion_mask"].sum()
            ).sum()
        advantages: torch.Tensor = output["advantages"]
        # (B,) in stock GRPO; subclasses may return per-token (B, T): a sample's advantage is then
        # the same on every token, so the first one stands for it.
        if advantages.dim() > 1:
            advantages = advantages[:, 0]
        self.last_advantages = advantages.detach().float().cpu().tolist()
        return output

    def async_generation_record(self, step: int, logs: dict[str, Any]) -> dict[str, Any] | None:
        """The step's rollout staleness and importance ratios; only async generation
        (workers.training.async_generation) has any."""
        return None

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
