"""What a tool call through the agent sandbox costs, and what running a batch at once gains.

(a) Round trip of one trivial tool call (sync and async): the median over --calls calls, each
    its own `call` request, as when the model makes one call at a time.
(b) A tool that waits 0.2 s (a remote API, a slow environment step) for 64 rollouts: the 64
    calls in one `call` batch (run concurrently in the sandbox) against the same 64 calls one
    after another, as rollouts/s and their ratio. The sync variant runs on threads; the async
    one on the sandbox's event loop.

Run: python bench/bench_tool_calls.py [--isolation bwrap|none] [--calls 200]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sandbox.agent_api import AgentLimits, EnvironmentSpec, ToolCall, ToolSpec
from sandbox.agent_host import ProcessAgentSandbox
from sandbox.isolation import detect_isolation
from sandbox.settings import Isolation, SandboxSettings

ROLLOUTS = 64
WAIT_S = 0.2
TOOLS = [
    ToolSpec("echo", "def echo(text: str) -> str:\n    return text\n"),
    ToolSpec("async_echo", "async def async_echo(text: str) -> str:\n    return text\n"),
]
ENVIRONMENT = EnvironmentSpec(
    name="waiting",
    class_name="Waiting",
    source='''
import asyncio
import time


class Waiting:
    """Each step waits like a call to a remote service."""

    def reset(self, index):
        self.index = index
        self.steps = 0

    def step(self, wait_s: float) -> int:
        time.sleep(wait_s)
        self.steps += 1
        return self.steps

    async def async_step(self, wait_s: float) -> int:
        await asyncio.sleep(wait_s)
        self.steps += 1
        return self.steps
''',
)


def round_trip_ms(sandbox: ProcessAgentSandbox, tool: str, calls: int) -> float:
    for _ in range(20):  # warm: the first calls import and allocate
        sandbox.call([ToolCall(tool, {"text": "warm"})])
    times = []
    for index in range(calls):
        started = time.perf_counter()
        outcome = sandbox.call([ToolCall(tool, {"text": str(index)})])[0]
        times.append(time.perf_counter() - started)
        assert outcome.error is None, outcome.error
    return statistics.median(times) * 1000


def rollouts_per_s(sandbox: ProcessAgentSandbox, method: str, batched: bool) -> float:
    opened = sandbox.open_rollouts("waiting", [{"index": i} for i in range(ROLLOUTS)])
    rollouts = [outcome.rollout for outcome in opened]
    calls = [ToolCall(method, {"wait_s": WAIT_S}, rollout) for rollout in rollouts]
    started = time.perf_counter()
    outcomes = sandbox.call(calls) if batched else [sandbox.call([call])[0] for call in calls]
    elapsed = time.perf_counter() - started
    assert all(outcome.error is None for outcome in outcomes), outcomes
    sandbox.close_rollouts(rollouts)
    return ROLLOUTS / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--isolation", choices=["bwrap", "none"], default=None)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    isolation: Isolation = args.isolation or ("bwrap" if detect_isolation() else "none")
    settings = SandboxSettings(isolation=isolation)
    limits = AgentLimits(tool_timeout_s=10.0, max_concurrent_calls=ROLLOUTS)
    print(f"isolation={isolation}, {ROLLOUTS} rollouts, tool wait {WAIT_S} s")
    with ProcessAgentSandbox(settings, limits) as sandbox:
        sandbox.load(TOOLS, [ENVIRONMENT])
        for tool in ("echo", "async_echo"):
            median = round_trip_ms(sandbox, tool, args.calls)
            print(
                f"(a) one trivial {tool} call, round trip: {median:.3f} ms (median of {args.calls})"
            )
        for label, method in (("sync", "step"), ("async", "async_step")):
            together = rollouts_per_s(sandbox, method, batched=True)
            apart = rollouts_per_s(sandbox, method, batched=False)
            print(
                f"(b) {label:5} tool waiting {WAIT_S} s: one batch {together:7.1f} rollouts/s, "
                f"one after another {apart:5.2f} rollouts/s, ratio {together / apart:5.1f}x"
            )


if __name__ == "__main__":
    main()
