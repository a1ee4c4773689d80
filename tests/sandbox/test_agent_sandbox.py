"""Tools and environments through real sandbox processes: loading and describing the code,
rollouts with their own state, every fault a typed outcome, restarts, concurrency, isolation.

Every test runs against the insecure mode and, where bubblewrap works, the isolated mode. The
sandbox is shared by a module, so each test also shows it keeps working after the last.
"""

from __future__ import annotations

import socket

import pytest

from sandbox.agent_api import (
    AgentCodeError,
    EnvironmentSpec,
    ToolCall,
    ToolErrorKind,
    ToolParameter,
    ToolSpec,
)
from sandbox.agent_host import ProcessAgentSandbox
from tests.sandbox.agent_sandboxes import (
    COUNTER,
    ECHO,
    JOB_TOKEN,
    MODES,
    NEEDS_BWRAP,
    assert_still_works,
    environment,
    ok,
    open_agent_sandbox,
    settings_for,
    tool,
    tool_time_limit,
)

sandbox = pytest.fixture(scope="module", params=MODES)(open_agent_sandbox)


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


def test_callers_on_several_threads_take_turns(sandbox: ProcessAgentSandbox) -> None:
    from concurrent.futures import ThreadPoolExecutor

    sandbox.load([ECHO], [COUNTER])
    rollouts = [outcome.rollout for outcome in sandbox.open_rollouts("counter", [{}] * 4)]

    def bump_ten_times(rollout: str) -> list[object]:
        return [ok(sandbox.call([ToolCall("bump", {}, rollout)])[0]) for _ in range(10)]

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(bump_ten_times, rollouts))
    assert results == [list(range(1, 11))] * 4
