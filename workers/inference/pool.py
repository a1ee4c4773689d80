"""Loaded models: base models kept in memory, LoRA adapters swapped on top of them.

Why one PEFT model per base with many named adapters: loading a base model costs seconds to
minutes, an adapter costs milliseconds (a few MB of LoRA weights). PEFT keeps several adapters
on one base (``load_adapter``/``set_adapter`` by name) and ``disable_adapter()`` answers for
the base model itself, so a base and all its jobs' adapters share one copy of the weights.
Both levels are LRU-bounded (RFT_INFERENCE_MAX_BASE_MODELS, RFT_INFERENCE_MAX_ADAPTERS).

One generation runs at a time per process (``generate`` holds a lock): the active adapter is
state of the shared model, and on CPU two generations would only split the same cores. More
throughput comes from more inference processes.

Where vLLM runs (chosen like a training worker's generation: RFT_GENERATION_BACKEND
auto|vllm|transformers), each base model is a vLLM engine instead, and an adapter is passed
with each request (multi-LoRA, workers.inference.vllm_engine). Everything around the generate
call (chat template, context check, decoding, stop strings, n) is the same code for both.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerBase

from service.artifacts.storage import S3_SCHEME, ArtifactStore, artifact_store
from service.base_models.built_in.tiny_model import BUILT_IN_MODEL_NAMES, resolve_base_model
from service.inference.protocol import GeneratedChoice, GenerationRequest, GenerationResult
from service.settings import Settings
from workers.training.generation import Generation, choose_generation

# The base-model name a fully fine-tuned job's model is loaded under (never a hub id or path).
WHOLE_MODEL_PREFIX = "whole-model:"

logger = logging.getLogger(__name__)


class InferenceInputError(ValueError):
    """A request the server cannot serve as asked (answered 400 with this message)."""


@dataclass
class LoadedBase:
    # transformers: a PreTrainedModel, or a PeftModel once an adapter was loaded onto it.
    # vLLM: a vllm.LLM, which takes the adapter with each request.
    model: Any
    tokenizer: PreTrainedTokenizerBase
    context_length: int | None
    adapters: OrderedDict[str, str] = field(default_factory=OrderedDict)  # name -> uri


def inference_generation(settings: Settings) -> Generation:
    """vLLM or transformers, decided as for a training job (RFT_GENERATION_BACKEND); vLLM's
    server mode is a training matter (weight sync), so an engine here is always in-process."""
    return choose_generation(settings.model_copy(update={"vllm_mode": "colocate"}))


def adapter_name(uri: str) -> str:
    """PEFT adapter names become module attribute names: no dots or slashes, so hash the URI."""
    return "adapter_" + hashlib.sha256(uri.encode()).hexdigest()[:16]


class ModelPool:
    def __init__(self, settings: Settings, store: ArtifactStore | None = None) -> None:
        self.settings = settings
        self.store = store or artifact_store(settings)
        self.max_base_models = settings.inference_max_base_models
        self.max_adapters = settings.inference_max_adapters
        # Raises GenerationSetupError (the server does not start) when vLLM is required but
        # cannot run here.
        self.generation = inference_generation(settings)
        self.device = self.generation.device
        if self.generation.why_not_vllm:
            logger.info("generating with transformers: %s", self.generation.why_not_vllm)
        logger.info("inference backend: %s", self.backend)
        # vLLM names each adapter by a positive integer too; kept for the process's life.
        self._lora_ids: dict[str, int] = {}
        self._bases: OrderedDict[str, LoadedBase] = OrderedDict()
        # Whole models of jobs that trained every weight: their serving name -> local folder.
        self._whole_models: dict[str, str] = {}
        self._lock = threading.Lock()

    @property
    def uses_vllm(self) -> bool:
        return self.generation.uses_vllm

    @property
    def backend(self) -> str:
        """What generates, e.g. ``vllm (cpu)`` or ``transformers (cpu)``."""
        return f"{self.generation.backend} ({self.device})"

    # Loading -------------------------------------------------------------------------------
    def _base(self, name: str) -> LoadedBase:
        loaded = self._bases.get(name)
        if loaded is not None:
            self._bases.move_to_end(name)
            return loaded
        path = self._base_model_path(name)
        logger.info("loading base model %s from %s", name, path)
        tokenizer = AutoTokenizer.from_pretrained(path, padding_side="left")
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        if self.uses_vllm:
            # Room first: an engine takes its share of the device's memory as it starts, so a
            # new one next to the one it replaces may not fit (the tokenizer above has already
            # shown that the model exists).
            self._evict(keep=self.max_base_models - 1)
            loaded = self._load_vllm(path, tokenizer)
        else:
            loaded = self._load_transformers(path, tokenizer)
        self._bases[name] = loaded
        self._evict(keep=self.max_base_models)
        return loaded

    def _evict(self, keep: int) -> None:
        """Unload the least recently used base models until ``keep`` are left."""
        while len(self._bases) > keep:
            evicted = next(iter(self._bases))
            self._unload(evicted)
            logger.info("unloaded base model %s (LRU)", evicted)

    def _unload(self, name: str) -> None:
        unloaded = self._bases.pop(name)
        if self.uses_vllm:
            from workers.inference import vllm_engine

            vllm_engine.shutdown(unloaded.model)

    def close(self) -> None:
        """Unload every base model (vLLM: end their engines' processes)."""
        with self._lock:
            for name in list(self._bases):
                self._unload(name)

    def _load_transformers(self, path: str, tokenizer: PreTrainedTokenizerBase) -> LoadedBase:
        use_bf16 = self.device == "cuda" and torch.cuda.is_bf16_supported()
        model: Any = AutoModelForCausalLM.from_pretrained(
            path, dtype=torch.bfloat16 if use_bf16 else torch.float32
        )
        model = model.to(self.device)
        model.eval()
        context = getattr(model.config, "max_position_embeddings", None)
        return LoadedBase(
            model=model,
            tokenizer=tokenizer,
            context_length=context if isinstance(context, int) else None,
        )

    def _load_vllm(self, path: str, tokenizer: PreTrainedTokenizerBase) -> LoadedBase:
        from workers.inference import vllm_engine

        engine = vllm_engine.load_engine(
            path,
            self.generation,
            max_adapters=self.max_adapters,
            max_model_length=self.generation.max_model_length,
        )
        return LoadedBase(
            model=engine, tokenizer=tokenizer, context_length=vllm_engine.context_length(engine)
        )

    def _as_whole_model(self, request: GenerationRequest) -> GenerationRequest:
        """A job that trained every weight (adapter 'full') left a whole model, not an adapter:
        it is served as a base model of its own, with no adapter over it."""
        if request.adapter is None or not request.adapter.full_model:
            return request
        name = adapter_name(request.adapter.uri)
        key = f"{WHOLE_MODEL_PREFIX}{name}"
        if key not in self._whole_models:
            directory = self._adapter_directory(request.adapter.uri, name, marker="config.json")
            self._whole_models[key] = str(directory)
        return request.model_copy(update={"base_model": key, "adapter": None})

    def _base_model_path(self, name: str) -> str:
        if name in self._whole_models:
            return self._whole_models[name]
        if name in BUILT_IN_MODEL_NAMES:
            return resolve_base_model(name, self.settings.resolved_model_cache_dir)
        if name.startswith("/"):
            # The API checked this at job creation; check again, since this process reads it.
            resolved = Path(name).resolve()
            if not any(
                resolved.is_relative_to(root) for root in self.settings.resolved_model_roots
            ):
                raise InferenceInputError(f"base model {name!r} is not under RFT_MODEL_ROOTS")
            return str(resolved)
        return name  # a hub id: transformers downloads it (or finds it in the HF cache)

    def _activate_adapter(self, base: LoadedBase, uri: str) -> str:
        name = adapter_name(uri)
        if name in base.adapters:
            base.adapters.move_to_end(name)
        else:
            directory = self._adapter_directory(uri, name)
            logger.info("loading adapter %s from %s", name, uri)
            if not base.adapters:
                from peft import PeftModel

                base.model = PeftModel.from_pretrained(
                    base.model, str(directory), adapter_name=name
                )
            else:
                base.model.load_adapter(str(directory), adapter_name=name)
            base.model.eval()
            base.adapters[name] = uri
        # Active before evicting: PEFT warns (and picks another) when the active one goes.
        base.model.set_adapter(name)
        while len(base.adapters) > self.max_adapters:
            evicted, _ = base.adapters.popitem(last=False)
            base.model.delete_adapter(evicted)
        return name

    def _adapter_directory(
        self, uri: str, name: str, *, marker: str = "adapter_config.json"
    ) -> Path:
        """The local folder of an artifact (``marker``: the file it must hold)."""
        if uri.startswith(S3_SCHEME):
            cache = self.settings.state_dir.resolve() / "inference" / "adapters" / name
            if (cache / marker).is_file():
                return cache
            cache.parent.mkdir(parents=True, exist_ok=True)
            return self.store.fetch_directory(uri, cache)
        directory = Path(uri).resolve()
        # Only artifacts: the API sends URIs from its database, but this process trusts nobody
        # with a path outside the artifact folder.
        if not directory.is_relative_to(self.settings.resolved_artifacts_dir):
            raise InferenceInputError("this adapter is not in the artifact store")
        if not (directory / marker).is_file():
            raise InferenceInputError("this adapter is no longer in the artifact store")
        return directory

    def _vllm_adapter(self, uri: str) -> tuple[str, int, Path]:
        """The LoRARequest fields for ``uri``; vLLM loads and caches (LRU) the adapter itself."""
        from workers.inference import vllm_engine

        name = adapter_name(uri)
        directory = self._adapter_directory(uri, name)
        rank = vllm_engine.lora_rank(directory)
        if rank > vllm_engine.MAX_LORA_RANK:
            raise InferenceInputError(
                f"this adapter's LoRA rank ({rank}) is above the {vllm_engine.MAX_LORA_RANK} "
                "the vLLM inference server accepts"
            )
        lora_id = self._lora_ids.setdefault(name, len(self._lora_ids) + 1)
        return name, lora_id, directory

    # Generation ----------------------------------------------------------------------------
    def generate(self, request: GenerationRequest) -> GenerationResult:
        with self._lock:
            request = self._as_whole_model(request)
            base = self._base(request.base_model)
            if self.uses_vllm:
                return self._generate_vllm(base, request)
            if request.adapter is not None:
                self._activate_adapter(base, request.adapter.uri)
            inputs = self._encode(base.tokenizer, request)
            return self._generate(base, inputs, request)

    def stream(self, request: GenerationRequest) -> Iterator[str | GenerationResult]:
        """Text as it is generated (one choice), then the whole result.

        What is yielded is always a prefix of the final text: text that could still turn out
        to begin a stop string is held back until it cannot. The lock is held until the
        generation thread is done, also when the consumer stops early (it is cancelled then).
        """
        from transformers import StoppingCriteria, StoppingCriteriaList, TextIteratorStreamer

        class Cancelled(StoppingCriteria):
            def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
                stop = cancelled.is_set()
                return torch.full((input_ids.shape[0],), stop, device=input_ids.device)

        if self.uses_vllm:
            # vLLM's offline engine answers whole: the stream is one piece, then the result.
            whole = self.generate(request)
            if whole.choices[0].text:
                yield whole.choices[0].text
            yield whole
            return

        cancelled = threading.Event()
        with self._lock:
            request = self._as_whole_model(request)
            base = self._base(request.base_model)
            if request.adapter is not None:
                self._activate_adapter(base, request.adapter.uri)
            inputs = self._encode(base.tokenizer, request)
            streamer = TextIteratorStreamer(
                base.tokenizer, skip_prompt=True, skip_special_tokens=True
            )
            outcome: dict[str, Any] = {}

            def run() -> None:
                try:
                    extra = {
                        "streamer": streamer,
                        "stopping_criteria": StoppingCriteriaList([Cancelled()]),
                    }
                    outcome["result"] = self._generate(base, inputs, request, extra)
                except BaseException as exc:  # re-raised in the consumer's thread
                    outcome["error"] = exc
                    streamer.end()

            thread = threading.Thread(target=run, name="inference-stream", daemon=True)
            thread.start()
            try:
                text, emitted = "", ""
                for piece in streamer:
                    text += piece
                    stable = _stable_prefix(text, request.stop)
                    if len(stable) > len(emitted):
                        yield stable[len(emitted) :]
                        emitted = stable
                thread.join()
                if "error" in outcome:
                    raise outcome["error"]
                result: GenerationResult = outcome["result"]
                final = result.choices[0].text
                if final.startswith(emitted) and len(final) > len(emitted):
                    yield final[len(emitted) :]
                yield result
            finally:
                cancelled.set()
                thread.join()

    def _encode(self, tokenizer: PreTrainedTokenizerBase, request: GenerationRequest) -> Any:
        if request.messages is not None:
            if not tokenizer.chat_template:
                raise InferenceInputError(
                    f"base model {request.base_model!r} has no chat template: use "
                    "/v1/completions with a prompt"
                )
            return tokenizer.apply_chat_template(
                request.messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
            )
        return tokenizer(request.prompt or "", return_tensors="pt")

    def _generate_vllm(self, base: LoadedBase, request: GenerationRequest) -> GenerationResult:
        from workers.inference import vllm_engine

        adapter = None if request.adapter is None else self._vllm_adapter(request.adapter.uri)
        prompt_ids = [int(t) for t in self._encode(base.tokenizer, request)["input_ids"][0]]
        _check_context(base, len(prompt_ids), request)
        try:
            outputs = vllm_engine.generate(base.model, prompt_ids, request, adapter)
        except Exception as exc:
            if vllm_engine.died(exc) and self._bases.get(request.base_model) is base:
                # Its process is gone (killed, out of memory): this request fails, the next
                # one starts the engine afresh.
                logger.error("the vLLM engine of %s died; unloading it", request.base_model)
                self._unload(request.base_model)
            raise
        choices = []
        for output in outputs:
            choice = self._choice(base.tokenizer, output.token_ids, request)
            if output.stopped:  # EOS, which vLLM may leave out of the token ids
                choice.finish_reason = "stop"
            choices.append(choice)
        if request.temperature <= 0:
            choices = [choices[0].model_copy() for _ in range(request.n)]
        return GenerationResult(choices=choices, prompt_tokens=len(prompt_ids))

    def _generate(
        self,
        base: LoadedBase,
        inputs: Any,
        request: GenerationRequest,
        extra: dict[str, Any] | None = None,
    ) -> GenerationResult:
        tokenizer = base.tokenizer
        _check_context(base, inputs["input_ids"].shape[1], request)
        input_ids = inputs["input_ids"].to(self.device)
        attention_mask = inputs["attention_mask"].to(self.device)
        sampling = request.temperature > 0
        # Greedy decoding gives n equal answers: compute one (transformers refuses
        # num_return_sequences > 1 without sampling) and repeat it.
        options: dict[str, Any] = {
            "max_new_tokens": request.max_tokens,
            "num_return_sequences": request.n if sampling else 1,
            "do_sample": sampling,
            "pad_token_id": tokenizer.pad_token_id,
        }
        if sampling:
            options.update(temperature=request.temperature, top_p=request.top_p, top_k=0)
        options.update(extra or {})
        if request.seed is not None:
            torch.manual_seed(request.seed)
        model = base.model
        with torch.inference_mode():
            if request.adapter is None and base.adapters:
                with model.disable_adapter():
                    output = model.generate(
                        input_ids=input_ids, attention_mask=attention_mask, **options
                    )
            else:
                output = model.generate(
                    input_ids=input_ids, attention_mask=attention_mask, **options
                )
        prompt_length = input_ids.shape[1]
        choices = [self._choice(tokenizer, row[prompt_length:].tolist(), request) for row in output]
        if not sampling:
            choices = [choices[0].model_copy() for _ in range(request.n)]
        return GenerationResult(choices=choices, prompt_tokens=prompt_length)

    @staticmethod
    def _choice(
        tokenizer: PreTrainedTokenizerBase, tokens: list[int], request: GenerationRequest
    ) -> GeneratedChoice:
        ends = {tokenizer.eos_token_id, tokenizer.pad_token_id} - {None}
        generated: list[int] = []
        finish_reason: str = "length"
        for token in tokens:
            if token in ends:
                finish_reason = "stop"
                break
            generated.append(token)
        text = str(tokenizer.decode(generated, skip_special_tokens=True))
        # Stop strings are cut after decoding: a stop string may span several tokens.
        cuts = [text.find(stop) for stop in request.stop if stop and stop in text]
        if cuts:
            text = text[: min(cuts)]
            finish_reason = "stop"
        return GeneratedChoice(
            text=text,
            finish_reason="stop" if finish_reason == "stop" else "length",
            completion_tokens=len(generated),
        )


def _stable_prefix(text: str, stops: list[str]) -> str:
    """The part of ``text`` that stays in the answer whatever comes next."""
    cuts = [text.find(stop) for stop in stops if stop and stop in text]
    if cuts:
        return text[: min(cuts)]
    hold_back = max((len(stop) for stop in stops), default=1) - 1
    return text[: len(text) - hold_back] if hold_back else text


def _check_context(base: LoadedBase, prompt_tokens: int, request: GenerationRequest) -> None:
    """Past its context a model fails inside generate (an index error): say so up front."""
    context = base.context_length
    if context is not None and prompt_tokens + request.max_tokens > context:
        raise InferenceInputError(
            f"the prompt ({prompt_tokens} tokens) and max_tokens ({request.max_tokens}) exceed "
            f"the context of {request.base_model!r} ({context} tokens): shorten the prompt or "
            "lower max_tokens"
        )
