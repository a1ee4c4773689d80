"""Concurrent scoring in the sandbox: async and threaded per-sample functions, per-sample time
limits, rate limits, and the rft_reward helpers, through real sandbox processes.

Concurrency is observed from inside the functions (how many samples were in flight at once),
never from wall-clock durations.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator

import pytest

from sandbox.api import RewardErrorKind, RewardFunctionSpec, ScoringBatch
from sandbox.isolation import detect_isolation
from sandbox.reward_host import ProcessSandbox
from sandbox.settings import SandboxSettings
from tests.layers import needs_layer, skip_busy_host

BWRAP = detect_isolation()
MODES = [
    "none",
    pytest.param("bwrap", marks=needs_layer(BWRAP, f"bubblewrap unusable: {BWRAP.reason}")),
]

# Each returns the number of its samples in flight when it started waiting (the peak so far).
ASYNC_PEAK = """
import asyncio

active = peak = 0

async def peak_async(prompt, completion, example):
    global active, peak
    active += 1
    peak = max(peak, active)
    seen = peak
    await asyncio.sleep(0.3)  # a judge API's round trip
    active -= 1
    return float(seen)
"""
THREADED_PEAK = """
import threading
import time

lock = threading.Lock()
active = peak = 0

def peak_threads(prompt, completion, example):
    global active, peak
    with lock:
        active += 1
        peak = max(peak, active)
        seen = peak
    time.sleep(0.3)  # a blocking HTTP call to a judge
    with lock:
        active -= 1
    return float(seen)
"""


def spec(name: str, source: str, **options: object) -> RewardFunctionSpec:
    return RewardFunctionSpec(name=name, source=textwrap.dedent(source), **options)  # type: ignore[arg-type]


def batch(count: int) -> ScoringBatch:
    completions = [f"completion {index}" for index in range(count)]
    if count > 1:
        completions[1] = "slow"
    return ScoringBatch(
        prompts=[f"prompt {index}" for index in range(count)],
        completions=completions,
        examples=[{"prompt": f"prompt {index}", "row": index} for index in range(count)],
    )


@pytest.fixture(scope="module", params=MODES)
def sandbox(request: pytest.FixtureRequest) -> Iterator[ProcessSandbox]:
    settings = SandboxSettings(
        isolation=request.param, call_timeout_s=20.0, kill_grace_s=0.5, sample_timeout_s=10.0
    )
    with ProcessSandbox(settings) as running:
        yield running


def test_async_samples_are_awaited_together_up_to_max_concurrency(
    sandbox: ProcessSandbox,
) -> None:
    sandbox.load([spec("peak_async", ASYNC_PEAK, max_concurrency=4)])
    result = sandbox.score(batch(12))["peak_async"]
    assert not result.errors
    peaks = [score for score in result.scores if score is not None]
    assert len(peaks) == 12
    # Several samples waited at once, and never more than the function allows.
    assert 2 <= max(peaks) <= 4


def test_slow_plain_functions_run_in_threads_and_1_keeps_them_sequential(
    sandbox: ProcessSandbox,
) -> None:
    sandbox.load(
        [
            spec("peak_threads", THREADED_PEAK, max_concurrency=5),
            spec(
                "one_by_one",
                THREADED_PEAK.replace("peak_threads", "one_by_one"),
                max_concurrency=1,
            ),
        ]
    )
    first = sandbox.score(batch(12))
    # The first samples run on the main thread until two prove slow, then the rest in threads.
    assert not first["peak_threads"].errors and None not in first["peak_threads"].scores
    assert 2 <= max(first["peak_threads"].scores) <= 5  # type: ignore[type-var]
    assert first["one_by_one"].scores == [1.0] * 12
    # Known to be slow now: the next batch starts in the thread pool.
    second = sandbox.score(batch(6))["peak_threads"]
    assert second.scores[0] is not None and not second.errors


def test_slow_cpu_bound_functions_stay_on_one_thread(sandbox: ProcessSandbox) -> None:
    # Threads cannot speed up code that holds the GIL, and would multiply its memory.
    source = """
    import threading, time
    def busy(prompt, completion, example):
        started, cpu_started = time.monotonic(), time.thread_time()
        while time.thread_time() < cpu_started + 0.005:
            pass
        print(f"cpu share {(time.thread_time() - cpu_started) / (time.monotonic() - started)}")
        return float(threading.current_thread() is threading.main_thread())
    """
    sandbox.load([spec("busy", source, max_concurrency=8)])
    result = sandbox.score(batch(8))["busy"]
    shares = [float(line.split()[-1]) for line in result.logs.splitlines()]
    if min(shares) < 0.2:
        skip_busy_host(f"too loaded to tell CPU-bound code from waiting: {shares}")
    assert result.scores == [1.0] * 8


@pytest.mark.parametrize(
    ("form", "options"),
    [
        ("sequential", {"max_concurrency": 1}),
        ("threads", {"max_concurrency": 8}),
        ("async", {"max_concurrency": 8}),
    ],
)
def test_a_slow_sample_loses_only_its_own_score(
    sandbox: ProcessSandbox, form: str, options: dict[str, int]
) -> None:
    if form == "async":
        source = """
        import asyncio
        async def judge(prompt, completion, example):
            await asyncio.sleep(60 if completion == "slow" else 0.01)
            return 1.0
        """
    else:
        source = """
        import time
        def judge(prompt, completion, example):
            time.sleep(60 if completion == "slow" else 0.01)
            return 1.0
        """
    sandbox.load([spec("judge", source, sample_timeout_s=0.5, **options)])
    result = sandbox.score(batch(6))["judge"]
    assert result.scores == [1.0, None, 1.0, 1.0, 1.0, 1.0]
    assert [(e.kind, e.sample_index) for e in result.errors] == [(RewardErrorKind.TIMEOUT, 1)]
    assert "0.5 s" in result.errors[0].message
    # A thread stuck in a timed-out sample is not left behind: the process was replaced.
    assert sandbox.score(batch(1))["judge"].scores == [1.0]


def test_async_batch_functions_are_awaited(sandbox: ProcessSandbox) -> None:
    source = """
    import asyncio
    async def batch_judge(prompts, completions, row, **kwargs):
        await asyncio.sleep(0.01)
        return [float(r) for r in row]
    """
    sandbox.load([spec("batch_judge", source)])
    assert sandbox.score(batch(3))["batch_judge"].scores == [0.0, 1.0, 2.0]


def test_rate_limit_spaces_the_calls_of_a_function(sandbox: ProcessSandbox) -> None:
    # Each sample reports when it started; 20 calls/s means starts at least 50 ms apart.
    source = """
    import time
    async def stamped(prompt, completion, example):
        return time.monotonic()
    """
    sandbox.load([spec("stamped", source, rate_limit_per_s=20, max_concurrency=16)])
    result = sandbox.score(batch(8))["stamped"]
    assert not result.errors
    starts = sorted(score for score in result.scores if score is not None)
    # Start slots are 50 ms apart; a wake-up can come a little late, so the check is on the
    # span (8 starts unlimited would all fall within a few ms), with room for that jitter.
    assert starts[-1] - starts[0] >= 7 * 0.05 * 0.8


def test_rate_limit_spaces_the_calls_of_a_batch_function(sandbox: ProcessSandbox) -> None:
    source = """
    import time
    def stamped_batch(prompts, completions, **kwargs):
        return [time.monotonic()] * len(completions)
    """
    sandbox.load([spec("stamped_batch", source, rate_limit_per_s=5)])
    first = sandbox.score(batch(2))["stamped_batch"].scores[0]
    second = sandbox.score(batch(2))["stamped_batch"].scores[0]
    assert first is not None and second is not None
    assert second - first >= 0.19  # 5 calls/s: 0.2 s apart


def test_rft_reward_helpers_retry_with_backoff_and_share_a_rate_limit(
    sandbox: ProcessSandbox,
) -> None:
    flaky = """
    import time
    from rft_reward import rate_limited, retry

    failures = {}

    @retry(attempts=3, base_delay_s=0.01)
    @rate_limited(50, key="judge")
    def flaky(prompt, completion, example):
        # Each sample fails twice (an API's 429), then answers.
        failures[completion] = failures.get(completion, 0) + 1
        if failures[completion] <= 2:
            raise ConnectionError("429 Too Many Requests")
        return time.monotonic()
    """
    hopeless = """
    from rft_reward import retry

    @retry(attempts=2, base_delay_s=0.01)
    def hopeless(prompt, completion, example):
        raise ConnectionError("the judge is down")
    """
    sandbox.load([spec("flaky", flaky, max_concurrency=1), spec("hopeless", hopeless)])
    results = sandbox.score(batch(4))
    assert not results["flaky"].errors and None not in results["flaky"].scores
    starts = sorted(results["flaky"].scores)  # type: ignore[type-var]
    # 12 calls (4 samples x 3 attempts) at 50/s: the last success comes >= 10 slots later.
    assert starts[-1] - starts[0] >= 8 * 0.02 * 0.8  # type: ignore[operator]
    (error, *_) = results["hopeless"].errors
    assert error.kind == RewardErrorKind.EXCEPTION and "the judge is down" in error.message
    assert error.traceback is not None and "the judge is down" in error.traceback


def test_prints_of_concurrent_samples_land_in_their_functions_log(sandbox: ProcessSandbox) -> None:
    talk = """
    import asyncio
    async def talk(prompt, completion, example):
        print("talk", example["row"])
        await asyncio.sleep(0.05)
        return 1.0
    """
    quiet = "def quiet(prompt, completion, example):\n    return 0.0\n"
    sandbox.load([spec("talk", talk), spec("quiet", quiet)])
    results = sandbox.score(batch(8))
    assert sorted(results["talk"].logs.split("\n")[:-1]) == sorted(f"talk {i}" for i in range(8))
    assert results["quiet"].logs == ""


def test_thread_count_stays_bounded(sandbox: ProcessSandbox) -> None:
    source = """
    import threading, time
    def threads(prompt, completion, example):
        time.sleep(0.05)
        return float(threading.active_count())
    """
    sandbox.load([spec("threads", source, max_concurrency=256)])
    result = sandbox.score(batch(80))["threads"]
    assert not result.errors
    # The pool's cap (32 threads) plus the main thread, whatever max_concurrency asks.
    assert max(score for score in result.scores if score is not None) <= 33
