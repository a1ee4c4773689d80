"""Tools and environments through real sandbox processes: loading and describing the code,
rollouts with their own state, every fault a typed outcome, restarts, concurrency, isolation.

Every test runs against the insecure mode and, where bubblewrap works, the isolated mode. The
sandbox is shared by a module, so each test also shows it keeps working after the last.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import socket
import textwrap
from collections.abc import Iterator

import pytest

from sandbox.agent_api import (
    AgentCodeError,
    AgentLimits,
    EnvironmentSpec,
    ToolCall,
    ToolErrorKind,
    ToolOutcome,
    ToolParameter,
    ToolSpec,
)
from sandbox.agent_host import ProcessAgentSandbox
from sandbox.isolation import detect_isolation
from sandbox.settings import SandboxSettings
from tests.layers import needs_layer

BWRAP = detect_isolation()
NEEDS_BWRAP = needs_layer(BWRAP, f"bubblewrap unusable: {BWRAP.reason}")
MODES = ["none", pytest.param("bwrap", marks=NEEDS_BWRAP)]
TOOL_TIMEOUT_S = 0.5
JOB_TOKEN = "job-token-value"


def settings_for(mode: str, **overrides: object) -> SandboxSettings:
    values: dict[str, object] = {
        "isolation": mode,
        "memory_limit_mb": 256,
        "kill_grace_s": 0.3,
        "call_timeout_s": 5.0,
        "env": {"JOB_TOKEN": JOB_TOKEN},
    }
    return SandboxSettings(**(values | overrides))  # type: ignore[arg-type]


@pytest.fixture(scope="module", params=MODES)
def sandbox(request: pytest.FixtureRequest) -> Iterator[ProcessAgentSandbox]:
    os.environ["RFT_TEST_WORKER_SECRET"] = "worker-secret-value"
    limits = AgentLimits(tool_timeout_s=TOOL_TIMEOUT_S, log_limit=200)
    with ProcessAgentSandbox(settings_for(request.param), limits) as running:
        yield running


def tool(name: str, source: str) -> ToolSpec:
    return ToolSpec(name=name, source=textwrap.dedent(source))


def environment(name: str, source: str, class_name: str) -> EnvironmentSpec:
    return EnvironmentSpec(name=name, source=textwrap.dedent(source), class_name=class_name)


COUNTER = environment(
    "counter",
    """
    class Counter:
        \"\"\"A number the model can bump.\"\"\"

        def reset(self, start=0):
            self.value = start
            self.history = []
            return f"the counter starts at {start}"

        def bump(self, by: int = 1) -> int:
            self.value += by
            self.history.append(by)
            return self.value

        def history_so_far(self) -> list:
            return self.history

        def get_reward(self):
            return self.value
    """,
    "Counter",
)
ECHO = tool(
    "echo",
    """
    def echo(text: str) -> str:
        return text
    """,
)


def ok(outcome: ToolOutcome) -> object:
    assert outcome.error is None, outcome.error
    return outcome.result


@contextlib.contextmanager
def tool_time_limit(sandbox: ProcessAgentSandbox, seconds: float) -> Iterator[None]:
    """The module's sandbox with another per-call limit, for one test."""
    before = sandbox.limits
    sandbox.limits = dataclasses.replace(before, tool_timeout_s=seconds)
    try:
        yield
    finally:
        sandbox.limits = before


def assert_still_works(sandbox: ProcessAgentSandbox) -> None:
    assert ok(sandbox.call([ToolCall("echo", {"text": "still here"})])[0]) == "still here"


# -- loading and describing ---------------------------------------------------------------


def test_load_describes_signatures_from_the_users_code(sandbox: ProcessAgentSandbox) -> None:
    loaded = sandbox.load(
        [
            tool(
                "search",
                '''
                from __future__ import annotations

                async def search(
                    query: str, limit: int = 5, tags: list[str] | None = None
                ) -> list[str]:
                    """Search the corpus.

                    Args:
                        query: what to look for
                    """
                    return []
                ''',
            ),
            tool(
                "plain",
                """
                import typing

                def plain(
                    numbers: list[int],
                    maybe: int | None = None,
                    opt: typing.Optional[str] = "x",
                    *,
                    flag=True,
                ):
                    return sum(numbers)
                """,
            ),
        ],
        [
            environment(
                "shop",
                """
                class Shop:
                    '''A shop.'''

                    def reset(self, **row):
                        pass

                    def buy(self, item: str, count: int = 1) -> bool:
                        '''Buy something.'''
                        return True

                    async def look(self) -> str:
                        return ""

                    @staticmethod
                    def price(item: str) -> float:
                        return 1.0

                    def _private(self):
                        pass

                    def get_reward(self):
                        return 0.0
                """,
                "Shop",
            )
        ],
    )
    search, plain = loaded.tools
    assert search.name == "search" and search.is_async
    assert search.doc.startswith("Search the corpus.")
    assert search.returns == "list[str]"
    assert search.parameters == (
        ToolParameter("query", "str"),
        ToolParameter("limit", "int", has_default=True, default=5),
        ToolParameter("tags", "list[str] | None", has_default=True, default=None),
    )
    assert not plain.is_async and plain.doc == "" and plain.returns is None
    assert [(p.name, p.annotation, p.default) for p in plain.parameters] == [
        ("numbers", "list[int]", None),
        ("maybe", "int | None", None),
        ("opt", "Optional[str]", "x"),
        ("flag", None, True),
    ]
    shop = loaded.environments["shop"]
    assert shop.class_name == "Shop" and shop.doc == "A shop." and shop.has_reward
    methods = {method.name: method for method in shop.methods}
    assert set(methods) == {"buy", "look", "price"}  # no reset, get_reward or _private
    assert methods["buy"].parameters == (
        ToolParameter("item", "str"),
        ToolParameter("count", "int", has_default=True, default=1),
    )  # no self
    assert methods["buy"].doc == "Buy something." and methods["look"].is_async
    assert [p.name for p in methods["price"].parameters] == ["item"]


@pytest.mark.parametrize(
    ("tools", "environments", "name", "words"),
    [
        ([tool("broken", "def broken(:\n")], [], "broken", "SyntaxError"),
        ([tool("raises", "raise RuntimeError('at import')\n")], [], "raises", "at import"),
        ([tool("absent", "def other():\n    pass\n")], [], "absent", "no function"),
        (
            [tool("default", "def default(x=object()):\n    pass\n")],
            [],
            "default",
            "not JSON-compatible",
        ),
        (
            [],
            [environment("noreset", "class Env:\n    def step(self):\n        pass\n", "Env")],
            "noreset",
            "no reset",
        ),
        ([], [environment("noclass", "X = 1\n", "Env")], "noclass", "no class"),
    ],
)
def test_code_that_cannot_load_names_its_tool(
    sandbox: ProcessAgentSandbox,
    tools: list[ToolSpec],
    environments: list[EnvironmentSpec],
    name: str,
    words: str,
) -> None:
    sandbox.load([ECHO], [])
    with pytest.raises(AgentCodeError) as raised:
        sandbox.load([ECHO, *tools], environments)
    assert raised.value.name == name and words in raised.value.message
    assert_still_works(sandbox)  # the previous code stays loaded


# -- rollouts ---------------------------------------------------------------------------


def test_each_rollout_is_reset_with_its_row_and_keeps_its_own_state(
    sandbox: ProcessAgentSandbox,
) -> None:
    sandbox.load([ECHO], [COUNTER])
    first, second = sandbox.open_rollouts("counter", [{"start": 1}, {"start": 10}])
    assert first.observation == "the counter starts at 1" and first.error is None
    assert second.observation == "the counter starts at 10"
    outcomes = sandbox.call(
        [
            ToolCall("bump", {"by": 2}, first.rollout),
            ToolCall("bump", {}, second.rollout),
            ToolCall("bump", {"by": 5}, first.rollout),
            ToolCall("echo", {"text": "standalone"}),
        ]
    )
    assert [ok(outcome) for outcome in outcomes] == [3, 11, 8, "standalone"]
    rewards = sandbox.rewards([first.rollout, second.rollout])
    assert [reward.reward for reward in rewards] == [8.0, 11.0]
    sandbox.close_rollouts([first.rollout])
    lost, alive = sandbox.call(
        [ToolCall("bump", {}, first.rollout), ToolCall("bump", {}, second.rollout)]
    )
    assert lost.error is not None and lost.error.kind is ToolErrorKind.ENVIRONMENT_LOST
    assert ok(alive) == 12


def test_calls_on_one_rollout_run_in_order(sandbox: ProcessAgentSandbox) -> None:
    sandbox.load(
        [],
        [
            environment(
                "log",
                """
                import asyncio, random

                class Log:
                    def reset(self):
                        self.entries = []

                    async def add(self, entry: int) -> int:
                        await asyncio.sleep(random.random() / 50)
                        self.entries.append(entry)
                        return len(self.entries)

                    def entries_so_far(self) -> list:
                        return self.entries
                """,
                "Log",
            )
        ],
    )
    rollouts = [outcome.rollout for outcome in sandbox.open_rollouts("log", [{}, {}])]
    calls = [ToolCall("add", {"entry": n}, rollout) for n in range(8) for rollout in rollouts]
    sandbox.call(calls)
    entries = sandbox.call([ToolCall("entries_so_far", {}, rollout) for rollout in rollouts])
    assert [ok(outcome) for outcome in entries] == [list(range(8))] * 2


def test_reset_gets_only_the_columns_it_names_and_a_failing_reset_loses_its_rollout(
    sandbox: ProcessAgentSandbox,
) -> None:
    sandbox.load(
        [],
        [
            environment(
                "picky",
                """
                class Picky:
                    def reset(self, answer):
                        if answer == "bad":
                            raise ValueError("no such puzzle")
                        self.answer = answer
                        return {"puzzle": answer[::-1]}

                    def guess(self, word: str) -> bool:
                        return word == self.answer
                """,
                "Picky",
            )
        ],
    )
    good, bad, missing = sandbox.open_rollouts(
        "picky", [{"answer": "abc", "prompt": "extra column"}, {"answer": "bad"}, {}]
    )
    assert good.error is None and good.observation == '{"puzzle": "cba"}'
    assert bad.error is not None and bad.error.kind is ToolErrorKind.EXCEPTION
    assert "no such puzzle" in bad.error.message and bad.observation is None
    assert missing.error is not None and missing.error.kind is ToolErrorKind.EXCEPTION
    right, lost = sandbox.call(
        [
            ToolCall("guess", {"word": "abc"}, good.rollout),
            ToolCall("guess", {"word": "x"}, bad.rollout),
        ]
    )
    assert ok(right) is True
    assert lost.error is not None and lost.error.kind is ToolErrorKind.ENVIRONMENT_LOST
    unknown = sandbox.open_rollouts("nowhere", [{}])[0]
    assert unknown.error is not None and unknown.error.kind is ToolErrorKind.ENVIRONMENT_LOST


def test_rewards_must_be_finite_numbers(sandbox: ProcessAgentSandbox) -> None:
    sandbox.load(
        [],
        [
            environment(
                "scored",
                """
                class Scored:
                    def reset(self, reward):
                        self.reward = reward

                    def get_reward(self):
                        return float(self.reward) if self.reward in ("nan", "inf") else self.reward
                """,
                "Scored",
            ),
            environment("unscored", "class U:\n    def reset(self):\n        pass\n", "U"),
        ],
    )
    rows: list[dict[str, object]] = [
        {"reward": 0.5},
        {"reward": True},
        {"reward": "nan"},
        {"reward": "text"},
        {"reward": None},
    ]
    rollouts = [outcome.rollout for outcome in sandbox.open_rollouts("scored", rows)]
    unscored = sandbox.open_rollouts("unscored", [{}])[0].rollout
    outcomes = sandbox.rewards([*rollouts, unscored, "never-opened"])
    assert [outcome.reward for outcome in outcomes[:2]] == [0.5, 1.0]
    for outcome in outcomes[2:5]:
        assert outcome.error is not None and outcome.error.kind is ToolErrorKind.INVALID_RETURN
    assert outcomes[5].error is not None and outcomes[5].error.kind is ToolErrorKind.UNKNOWN_TOOL
    assert outcomes[6].error is not None
    assert outcomes[6].error.kind is ToolErrorKind.ENVIRONMENT_LOST


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


def test_calls_run_concurrently(sandbox: ProcessAgentSandbox) -> None:
    # Each call waits at a barrier for all 16 of its kind: it returns only if all 16 were in
    # flight at once (one after another, the first would wait out the barrier's timeout and
    # fail). Nothing depends on how fast the host is.
    sandbox.load(
        [
            tool(
                "nap",
                "import threading\nmet = threading.Barrier(16)\n"
                "def nap(i: int) -> int:\n"
                "    print(i)\n    met.wait(timeout=20)\n    return i\n",
            ),
            tool(
                "async_nap",
                "import asyncio\nmet = None\n"
                "async def async_nap(i: int) -> int:\n"
                "    global met\n    met = met or asyncio.Barrier(16)\n"
                "    print(i)\n    await asyncio.wait_for(met.wait(), 20)\n    return i\n",
            ),
        ],
        [],
    )
    calls = [ToolCall("nap", {"i": i}) for i in range(16)]
    calls += [ToolCall("async_nap", {"i": i}) for i in range(16, 32)]
    with tool_time_limit(sandbox, 30):
        outcomes = sandbox.call(calls)
    assert [ok(outcome) for outcome in outcomes] == list(range(32))
    assert [outcome.logs for outcome in outcomes] == [f"{i}\n" for i in range(32)]


# -- isolation ----------------------------------------------------------------------------


def test_only_the_jobs_own_environment_and_secrets_are_masked(
    sandbox: ProcessAgentSandbox,
) -> None:
    sandbox.load(
        [
            tool(
                "env",
                """
                import os
                def env(name: str):
                    return os.environ.get(name)
                """,
            ),
            tool(
                "leak",
                """
                import os
                def leak():
                    print(os.environ["JOB_TOKEN"])
                    raise ValueError("token " + os.environ["JOB_TOKEN"])
                """,
            ),
        ],
        [],
    )
    job, worker = sandbox.call(
        [
            ToolCall("env", {"name": "JOB_TOKEN"}),
            ToolCall("env", {"name": "RFT_TEST_WORKER_SECRET"}),
        ]
    )
    assert ok(job) == JOB_TOKEN and ok(worker) is None
    leak = sandbox.call([ToolCall("leak", {})])[0]
    assert leak.error is not None
    assert JOB_TOKEN not in leak.error.message + (leak.error.traceback or "") + leak.logs
    assert "[secret JOB_TOKEN]" in leak.error.message


@pytest.mark.parametrize("mode", MODES)
def test_jobs_do_not_share_a_sandbox(mode: str) -> None:
    state = tool(
        "state",
        """
        import os
        SEEN = []
        def state(mark: str) -> list:
            SEEN.append(mark)
            return SEEN
        """,
    )
    with (
        ProcessAgentSandbox(settings_for(mode)) as first,
        ProcessAgentSandbox(settings_for(mode)) as second,
    ):
        for running in (first, second):
            running.load([state], [COUNTER])
        rollout = first.open_rollouts("counter", [{"start": 1}])[0].rollout
        assert ok(first.call([ToolCall("state", {"mark": "first"})])[0]) == ["first"]
        assert ok(second.call([ToolCall("state", {"mark": "second"})])[0]) == ["second"]
        # Another job's rollout id means nothing here.
        other = second.call([ToolCall("bump", {}, rollout)])[0]
        assert other.error is not None and other.error.kind is ToolErrorKind.ENVIRONMENT_LOST


@NEEDS_BWRAP
def test_no_host_network_with_or_without_allow_network() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.5)
    port = listener.getsockname()[1]
    probe = tool(
        "connect",
        """
        import socket
        def connect(port: int) -> str:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            except OSError as error:
                return f"refused: {error}"
            return "connected"
        """,
    )
    try:
        with ProcessAgentSandbox(settings_for("bwrap")) as isolated:
            isolated.load([probe], [])
            result = ok(isolated.call([ToolCall("connect", {"port": port})])[0])
            assert str(result).startswith("refused")
        with pytest.raises(TimeoutError):
            listener.accept()
        # With the network too: the sandbox's loopback is its own (the way out is the egress
        # proxy, which refuses the host's loopback: tests/sandbox/test_sandbox_egress.py).
        with ProcessAgentSandbox(settings_for("bwrap", allow_network=True)) as networked:
            networked.load([probe], [])
            result = ok(networked.call([ToolCall("connect", {"port": port})])[0])
            assert str(result).startswith("refused")
        with pytest.raises(TimeoutError):
            listener.accept()
    finally:
        listener.close()


def test_output_of_subprocesses_reaches_a_lone_calls_logs(sandbox: ProcessAgentSandbox) -> None:
    sandbox.load(
        [
            tool(
                "shell",
                """
                import subprocess, sys
                def shell() -> int:
                    command = [sys.executable, "-c", "print('from a child')"]
                    return subprocess.run(command).returncode
                """,
            )
        ],
        [],
    )
    outcome = sandbox.call([ToolCall("shell", {})])[0]
    assert ok(outcome) == 0 and outcome.logs == "from a child\n"


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


def test_callers_on_several_threads_take_turns(sandbox: ProcessAgentSandbox) -> None:
    from concurrent.futures import ThreadPoolExecutor

    sandbox.load([ECHO], [COUNTER])
    rollouts = [outcome.rollout for outcome in sandbox.open_rollouts("counter", [{}] * 4)]

    def bump_ten_times(rollout: str) -> list[object]:
        return [ok(sandbox.call([ToolCall("bump", {}, rollout)])[0]) for _ in range(10)]

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(bump_ten_times, rollouts))
    assert results == [list(range(1, 11))] * 4
