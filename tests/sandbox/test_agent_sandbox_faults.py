"""Every fault of tools and environments is a typed outcome, through real sandbox processes:
user exceptions, time limits, a process killed or stuck, memory, stuck threads. The sandbox is
shared by the module (tests/sandbox/agent_sandboxes.py), so each test also shows it keeps
working after the last."""

from __future__ import annotations

import pytest

from sandbox.agent_api import (
    ToolCall,
    ToolErrorKind,
)
from sandbox.agent_host import ProcessAgentSandbox
from tests.sandbox.agent_sandboxes import (
    COUNTER,
    ECHO,
    MODES,
    assert_still_works,
    ok,
    open_agent_sandbox,
    tool,
    tool_time_limit,
)

sandbox = pytest.fixture(scope="module", params=MODES)(open_agent_sandbox)


# -- faults are typed outcomes ------------------------------------------------------------

FAULTS = [
    ECHO,
    tool(
        "fails",
        """
        def helper():
            raise KeyError("the key " + "is missing")

        def fails(x: int) -> int:
            print("about to fail")
            return helper()
        """,
    ),
    tool("not_json", "def not_json():\n    return {1, 2}\n"),
    tool("nan", "def nan():\n    return float('nan')\n"),
    # Each prints when it starts and, were it not stopped, when it ends: a call cut off at
    # its limit reports the first line only (the log is closed when the outcome is made).
    tool(
        "sleepy",
        "import time\ndef sleepy():\n    print('started')\n    time.sleep(3)\n    print('ended')\n",
    ),
    tool("spins", "def spins():\n    print('started')\n    while True:\n        pass\n"),
    tool(
        "waits",
        "import asyncio\nasync def waits():\n    print('started')\n    await asyncio.sleep(3)\n"
        "    print('ended')\n",
    ),
    tool(
        "blocks_loop",
        "import time\nasync def blocks_loop():\n    print('started')\n    time.sleep(3)\n"
        "    print('ended')\n",
    ),
    tool("exits", "import os\ndef exits():\n    os._exit(3)\n"),
    tool(
        "self_kill",
        "import os, signal\ndef self_kill():\n    os.kill(os.getpid(), signal.SIGKILL)\n",
    ),
    tool(
        "hog",
        "def hog():\n    blocks = []\n"
        "    while True:\n        blocks.append(bytearray(50 << 20))\n",
    ),
    tool(
        "hangs",
        """
        import signal, time
        async def hangs():
            # Even the watchdog's signal is blocked: only the parent's deadline ends this.
            signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGALRM])
            time.sleep(30)
        """,
    ),
]


def test_user_faults_are_typed_outcomes(sandbox: ProcessAgentSandbox) -> None:
    sandbox.load(FAULTS, [COUNTER])
    outcomes = sandbox.call(
        [
            ToolCall("fails", {"x": 1}),
            ToolCall("not_json", {}),
            ToolCall("nan", {}),
            ToolCall("fails", {"y": 1}),
            ToolCall("fails", {}),
            ToolCall("missing", {}),
            ToolCall("echo", {"text": "fine"}),
        ]
    )
    raised, not_json, nan, wrong_name, no_argument, unknown, fine = outcomes
    assert raised.error is not None and raised.error.kind is ToolErrorKind.EXCEPTION
    assert raised.error.message == "KeyError: 'the key is missing'"
    trace = raised.error.traceback or ""
    assert "helper()" in trace and "agent_child" not in trace and "threading" not in trace
    assert "/child/" not in trace  # no frame of the child runtime (sandbox/child/)
    assert raised.logs == "about to fail\n"
    assert not_json.error is not None and not_json.error.kind is ToolErrorKind.NOT_SERIALIZABLE
    assert nan.error is not None and nan.error.kind is ToolErrorKind.NOT_SERIALIZABLE
    for bad in (wrong_name, no_argument):
        assert bad.error is not None and bad.error.kind is ToolErrorKind.BAD_ARGUMENTS
    assert "fails(x: int) -> int" in (no_argument.error.message if no_argument.error else "")
    assert unknown.error is not None and unknown.error.kind is ToolErrorKind.UNKNOWN_TOOL
    assert ok(fine) == "fine"


@pytest.mark.parametrize("name", ["sleepy", "spins", "waits", "blocks_loop"])
def test_a_tool_over_its_time_limit_times_out_and_the_job_goes_on(
    sandbox: ProcessAgentSandbox, name: str
) -> None:
    sandbox.load(FAULTS, [COUNTER])
    rollout = sandbox.open_rollouts("counter", [{"start": 1}])[0].rollout
    timed_out, beside = sandbox.call([ToolCall(name, {}), ToolCall("bump", {}, rollout)])
    assert timed_out.error is not None and timed_out.error.kind is ToolErrorKind.TIMEOUT
    # Cut off at its own limit, before its end; not by the parent's hard deadline (that kills
    # the process: the rollout below would be lost).
    assert timed_out.logs == "started\n"
    assert ok(beside) == 2
    # No restart: the rollout's state is still there.
    assert ok(sandbox.call([ToolCall("bump", {}, rollout)])[0]) == 3
    assert_still_works(sandbox)


@pytest.mark.parametrize(("name", "kind"), [("exits", "killed"), ("self_kill", "killed")])
def test_a_tool_that_kills_its_process_loses_only_the_rollouts(
    sandbox: ProcessAgentSandbox, name: str, kind: str
) -> None:
    sandbox.load(FAULTS, [COUNTER])
    rollout = sandbox.open_rollouts("counter", [{"start": 1}])[0].rollout
    killed, in_flight = sandbox.call([ToolCall(name, {}), ToolCall("bump", {}, rollout)])
    assert killed.error is not None and killed.error.kind == kind
    assert in_flight.error is not None and in_flight.error.kind == kind
    later, lost = sandbox.call([ToolCall("echo", {"text": "back"}), ToolCall("bump", {}, rollout)])
    assert ok(later) == "back"
    assert lost.error is not None and lost.error.kind is ToolErrorKind.ENVIRONMENT_LOST
    fresh = sandbox.open_rollouts("counter", [{"start": 5}])[0].rollout
    assert ok(sandbox.call([ToolCall("bump", {}, fresh)])[0]) == 6


def test_a_memory_hog_costs_only_its_call(sandbox: ProcessAgentSandbox) -> None:
    sandbox.load(FAULTS, [])
    # Room to reach the memory limit on a loaded host: at the module's 0.5 s it once timed out.
    with tool_time_limit(sandbox, 30):
        outcome = sandbox.call([ToolCall("hog", {})])[0]
    assert outcome.error is not None
    # RLIMIT_AS raises MemoryError; a cgroup's OOM kill would end the process instead.
    assert outcome.error.kind in (ToolErrorKind.EXCEPTION, ToolErrorKind.KILLED)
    assert_still_works(sandbox)


def test_a_process_that_stops_answering_is_killed_at_the_hard_deadline(
    sandbox: ProcessAgentSandbox,
) -> None:
    sandbox.load(FAULTS, [])
    # Left alone it would return None after 30 s: a timeout is the hard deadline's doing.
    outcome = sandbox.call([ToolCall("hangs", {})])[0]
    assert outcome.error is not None and outcome.error.kind is ToolErrorKind.TIMEOUT
    assert_still_works(sandbox)


# -- concurrency --------------------------------------------------------------------------


def test_too_many_stuck_threads_replace_the_process(sandbox: ProcessAgentSandbox) -> None:
    sandbox.load(FAULTS, [COUNTER])
    rollout = sandbox.open_rollouts("counter", [{"start": 1}])[0].rollout
    # time.sleep cannot be interrupted: every timed-out call leaves its thread behind, and
    # once half the threads are stuck the process is replaced rather than starved.
    outcomes = sandbox.call([ToolCall("sleepy", {}) for _ in range(16)])
    assert all(o.error is not None and o.error.kind is ToolErrorKind.TIMEOUT for o in outcomes)
    lost = sandbox.call([ToolCall("bump", {}, rollout)])[0]
    assert lost.error is not None and lost.error.kind is ToolErrorKind.ENVIRONMENT_LOST
    assert_still_works(sandbox)
