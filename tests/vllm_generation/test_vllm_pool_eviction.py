"""The inference pool's vLLM engines under LRU eviction (RFT_INFERENCE_MAX_BASE_MODELS).

Several engines live in one inference server; evicting one must leave the others answering,
and must give its memory back. Three distinct tiny models (the built-in one and two of other
shapes, random weights of their own) are asked in turn; every greedy answer must be the one a
fresh engine gives for that model, computed in a process of its own with nothing else loaded.

Before the fix, each vLLM engine ran in the server's process and an eviction ran vLLM's
process-wide teardown (workers.inference.vllm_engine's docstring): the engines left failed
("pipeline model parallel group is not initialized"), and on CPU a second engine in the
process could not even start (its KV cache share went to the first).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from service.base_models.built_in.model_building import directory_digest
from service.base_models.built_in.tiny_model import TINY_MODEL_NAME, ensure_tiny_model, save_qwen2
from service.inference.protocol import GenerationRequest
from service.settings import Settings
from tests.vllm_generation.conftest import MODEL_CACHE_DIR, VLLM_CACHE_ROOT
from workers.inference.pool import ModelPool

pytestmark = pytest.mark.vllm

REPO = Path(__file__).resolve().parents[2]
FRESH_ANSWERS_DIR = VLLM_CACHE_ROOT / "fresh-engine-answers"
PROMPT = "The cat and the dog"
MAX_TOKENS = 12
# An engine on CPU is ~2.3 GiB (its EngineCore and worker processes, KV cache included): after
# evictions and a reload, the whole process tree may have grown by much less than one.
RSS_GROWTH_BOUND = 512 << 20

# Shapes unlike the built-in model's (hidden 64, 2 heads, 2 layers); vLLM's CPU attention
# needs head_dim >= 32.
OTHER_MODELS = {
    "wide": {"hidden_size": 128, "num_attention_heads": 4},
    "deep": {"hidden_size": 64, "num_attention_heads": 2, "num_hidden_layers": 3},
}

# A fresh engine's greedy token ids for one model: one engine, in a process of its own, with
# the options the pool gives its engines.
FRESH_ENGINE = """
import json, sys
from vllm import LLM, SamplingParams
from vllm.inputs import TokensPrompt
from workers.inference.vllm_engine import MAX_LORA_RANK, MAX_LORAS_PER_BATCH
model, prompt_ids, max_tokens = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
engine = LLM(model=model, enable_lora=True, max_loras=MAX_LORAS_PER_BATCH, max_cpu_loras=16,
             max_lora_rank=MAX_LORA_RANK, gpu_memory_utilization=0.1)
(output,) = engine.generate([TokensPrompt(prompt_token_ids=prompt_ids)],
                            SamplingParams(max_tokens=max_tokens, temperature=0.0),
                            use_tqdm=False)
print("TOKENS " + json.dumps(list(output.outputs[0].token_ids)))
"""


def other_model(name: str) -> Path:
    """A tiny model with the built-in one's tokenizer and another shape, at a fixed path (vLLM's
    compile cache is keyed by it); built once, landing with one rename."""
    from transformers import AutoTokenizer

    target = MODEL_CACHE_DIR / f"pool-{name}-v1"
    if (target / "config.json").is_file():
        return target
    tokenizer = AutoTokenizer.from_pretrained(ensure_tiny_model(MODEL_CACHE_DIR))
    shape = {"intermediate_size": 256, "num_hidden_layers": 2, **OTHER_MODELS[name]}
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=MODEL_CACHE_DIR))
    try:
        tokenizer.save_pretrained(staging)
        save_qwen2(staging, tokenizer, num_key_value_heads=1, initializer_range=0.1, **shape)
        os.rename(staging, target)
    except OSError:
        if not (target / "config.json").is_file():
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def fresh_engine_tokens(directory: str, prompt_ids: str) -> list[int]:
    """A fresh engine's greedy tokens for the model in ``directory``. An engine start is
    ~30 s on 2 cores, so the answer is kept beside vLLM's compile cache, which is keyed by the
    vLLM, torch and transformers pins; its file is keyed by the model's bytes and everything
    the fresh engine is given. Another version or model computes it afresh."""
    key = hashlib.sha256(
        "\n".join(
            [directory_digest(Path(directory)), FRESH_ENGINE, prompt_ids, str(MAX_TOKENS)]
        ).encode()
    ).hexdigest()[:24]
    kept = FRESH_ANSWERS_DIR / f"{key}.json"
    if kept.is_file():
        return list(json.loads(kept.read_text()))
    done = subprocess.run(
        [sys.executable, "-c", FRESH_ENGINE, directory, prompt_ids, str(MAX_TOKENS)],
        env={**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0"},
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    lines = [line for line in done.stdout.splitlines() if line.startswith("TOKENS ")]
    assert done.returncode == 0 and lines, done.stderr[-4000:]
    tokens: list[int] = json.loads(lines[-1].removeprefix("TOKENS "))
    FRESH_ANSWERS_DIR.mkdir(parents=True, exist_ok=True)
    staging = kept.with_suffix(f".{os.getpid()}.tmp")
    staging.write_text(json.dumps(tokens))
    os.replace(staging, kept)
    return tokens


def request(model: str) -> GenerationRequest:
    return GenerationRequest(
        base_model=model, prompt=PROMPT, max_tokens=MAX_TOKENS, temperature=0, top_p=1, n=1
    )


@pytest.fixture(scope="module")
def models() -> dict[str, str]:
    """Name for the pool -> model directory."""
    return {
        TINY_MODEL_NAME: str(ensure_tiny_model(MODEL_CACHE_DIR)),
        **{str(path): str(path) for path in map(other_model, OTHER_MODELS)},
    }


@pytest.fixture(scope="module")
def fresh_answers(models: dict[str, str]) -> dict[str, str]:
    """What each model answers from a fresh engine, as the pool turns the tokens into text."""
    from transformers import AutoTokenizer

    answers = {}
    for name, directory in models.items():
        tokenizer = AutoTokenizer.from_pretrained(directory)
        prompt_ids = json.dumps(tokenizer(PROMPT)["input_ids"])
        tokens = fresh_engine_tokens(directory, prompt_ids)
        answers[name] = ModelPool._choice(tokenizer, tokens, request(name)).text
    # Distinct models: an answer proves which one generated it.
    assert len(set(answers.values())) == len(answers), answers
    return answers


PoolFactory = Callable[[int], ModelPool]


@pytest.fixture
def make_pool(tmp_path: Path) -> Iterator[PoolFactory]:
    pools: list[ModelPool] = []

    def make(max_base_models: int) -> ModelPool:
        settings = Settings(
            state_dir=tmp_path,
            generation_backend="vllm",
            model_roots=str(MODEL_CACHE_DIR),
            model_cache_dir=MODEL_CACHE_DIR,
            inference_max_base_models=max_base_models,
        )
        pools.append(ModelPool(settings))
        return pools[-1]

    yield make
    for pool in pools:
        pool.close()


def ask(pool: ModelPool, model: str) -> str:
    return pool.generate(request(model)).choices[0].text


def engine_processes() -> set[int]:
    """The live processes of this process's vLLM engines: its children that vLLM titled
    ``VLLM::EngineCore``, and theirs (on CPU a ``VLLM::Worker``). Not multiprocessing's resource
    tracker, nor what other children (a test stack's servers) started."""
    live = set()
    for engine in psutil.Process().children():
        with contextlib.suppress(psutil.NoSuchProcess):
            if engine.name().startswith("VLLM"):
                for process in [engine, *engine.children(recursive=True)]:
                    if process.status() != psutil.STATUS_ZOMBIE:
                        live.add(process.pid)
    return live


def tree_rss() -> int:
    """The resident memory of this process and its engines' processes."""
    total = psutil.Process().memory_info().rss
    for pid in engine_processes():
        with contextlib.suppress(psutil.NoSuchProcess):
            total += psutil.Process(pid).memory_info().rss
    return total


def exited(pids: set[int], timeout_s: float = 10) -> bool:
    """Whether all of ``pids`` are gone (or zombies: their memory is freed already)."""
    deadline = time.monotonic() + timeout_s
    while pids & engine_processes():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def test_engines_are_kept_up_to_the_limit_and_the_least_recently_used_goes(
    make_pool: PoolFactory, models: dict[str, str], fresh_answers: dict[str, str]
) -> None:
    """Two engines at most (a limit of one is the same eviction with nothing kept beside):
    both answer, the third model evicts the one used least recently, whose process ends and
    gives its memory back, and an engine whose process died is started afresh. Four engine
    starts in all (and three fresh ones for the expected answers, unless kept): on 2 cores
    each is ~30 s."""
    from vllm.v1.engine.exceptions import EngineDeadError

    first, second, third = models
    pool = make_pool(2)

    assert ask(pool, first) == fresh_answers[first]
    first_engine = engine_processes()
    assert ask(pool, second) == fresh_answers[second]
    both_engines = engine_processes()
    two_engines_rss, pool_rss = tree_rss(), psutil.Process().memory_info().rss
    assert ask(pool, first) == fresh_answers[first]  # both kept
    assert list(pool._bases) == [second, first]
    assert engine_processes() == both_engines  # nothing started again

    assert ask(pool, third) == fresh_answers[third]  # evicts the second, used least recently
    assert list(pool._bases) == [first, third]
    # The engine that stayed is unharmed by the other's shutdown, and so is the new one.
    assert ask(pool, first) == fresh_answers[first]
    assert ask(pool, third) == fresh_answers[third]
    assert list(pool._bases) == [first, third]

    # Each engine is a process of its own, which ended with its eviction: its memory is back.
    second_engine = both_engines - first_engine
    assert first_engine and second_engine and not first_engine & second_engine
    assert exited(second_engine), "the evicted engine's process is still running"
    assert first_engine <= engine_processes()
    assert tree_rss() < two_engines_rss + RSS_GROWTH_BOUND, (tree_rss(), two_engines_rss)
    assert psutil.Process().memory_info().rss < pool_rss + RSS_GROWTH_BOUND // 2

    # An engine whose process dies fails its request, and the next one starts it afresh; the
    # other engine goes on answering.
    for pid in first_engine:
        os.kill(pid, signal.SIGKILL)
    with pytest.raises(EngineDeadError):
        ask(pool, first)
    assert list(pool._bases) == [third]
    assert ask(pool, first) == fresh_answers[first]
    assert ask(pool, third) == fresh_answers[third]
