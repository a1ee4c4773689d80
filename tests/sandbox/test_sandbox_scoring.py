"""Scoring through real sandbox processes: both forms, typed errors, recovery, logs, reloads.

Every test runs against the insecure mode and, where bubblewrap works, the isolated mode.
The sandbox is shared by a module so each test also shows it keeps working after the last.
"""

from __future__ import annotations

import os
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

# Submodules, not the package: under pytest the tests/sandbox folder can shadow the name.
from sandbox.api import RewardCodeError, RewardErrorKind, RewardFunctionSpec, ScoringBatch
from sandbox.isolation import SandboxUnavailableError, detect_isolation
from sandbox.reward_host import ProcessSandbox
from sandbox.settings import SandboxSettings
from tests.layers import needs_layer

BWRAP = detect_isolation()
MODES = [
    "none",
    pytest.param("bwrap", marks=needs_layer(BWRAP, f"bubblewrap unusable: {BWRAP.reason}")),
]
CALL_TIMEOUT_S = 1.0


def spec(name: str, source: str, version: int = 1) -> RewardFunctionSpec:
    return RewardFunctionSpec(name=name, source=textwrap.dedent(source), version=version)


def text_batch(*completions: str, step: int = 0) -> ScoringBatch:
    prompts = [f"prompt {index}" for index in range(len(completions))]
    examples = [
        {"prompt": p, "answer": c.upper(), "row": i}
        for i, (p, c) in enumerate(zip(prompts, completions, strict=True))
    ]
    return ScoringBatch(
        prompts=prompts, completions=list(completions), examples=examples, step=step
    )


LENGTH = spec(
    "length",
    """
    def length(prompt, completion, example):
        return float(len(completion))
    """,
)


def assert_scores_normally(sandbox: ProcessSandbox) -> None:
    sandbox.load([LENGTH])
    result = sandbox.score(text_batch("a", "bbb"))["length"]
    assert result.scores == [1.0, 3.0] and not result.errors


@pytest.fixture(scope="module", params=MODES)
def sandbox(request: pytest.FixtureRequest) -> Iterator[ProcessSandbox]:
    os.environ["RFT_TEST_WORKER_SECRET"] = "worker-secret-value"
    settings = SandboxSettings(
        isolation=request.param,
        call_timeout_s=CALL_TIMEOUT_S,
        kill_grace_s=0.3,
        memory_limit_mb=128,
        log_limit_bytes=1000,
        env={"JOB_TOKEN": "job-token-value"},
    )
    with ProcessSandbox(settings) as running:
        yield running


def test_sample_form_gets_prompt_completion_and_example(sandbox: ProcessSandbox) -> None:
    sandbox.load(
        [
            spec(
                "match",
                """
                def match(prompt, completion, example):
                    assert prompt == example["prompt"]
                    return 1.0 if completion.upper() == example["answer"] else 0.0
                """,
            )
        ]
    )
    result = sandbox.score(text_batch("yes", "no"))["match"]
    assert result.scores == [1.0, 1.0]
    assert result.errors == [] and result.failed_samples == 0
    assert (result.name, result.version) == ("match", 1)
    assert result.duration_s >= 0


def test_batch_form_gets_trl_style_arguments(sandbox: ProcessSandbox) -> None:
    sandbox.load(
        [
            spec(
                "columns",
                """
                def columns(prompts, completions, answer, row, **kwargs):
                    assert "prompt" not in kwargs and not kwargs
                    rows = zip(completions, answer, row, strict=True)
                    return [float(r) + (c.upper() == a) for c, a, r in rows]
                """,
            ),
            spec(
                "named_only",
                """
                def named_only(prompts, completions):
                    return [len(c) for c in completions]
                """,
            ),
        ]
    )
    results = sandbox.score(text_batch("x", "yy", "zzz"))
    assert results["columns"].scores == [1.0, 2.0, 3.0]
    # A function without **kwargs is not handed columns it did not ask for.
    assert results["named_only"].scores == [1.0, 2.0, 3.0]


def test_chat_prompts_get_conversational_completions(sandbox: ProcessSandbox) -> None:
    sandbox.load(
        [
            spec(
                "chat",
                """
                def chat(prompts, completions, **kwargs):
                    return [float(c[0]["role"] == "assistant" and p[-1]["role"] == "user")
                            for p, c in zip(prompts, completions)]
                """,
            )
        ]
    )
    prompt = [{"role": "user", "content": "hi"}]
    batch = ScoringBatch(prompts=[prompt], completions=["hello"], examples=[{"prompt": prompt}])
    assert sandbox.score(batch)["chat"].scores == [1.0]


def test_none_is_a_missing_score_not_an_error(sandbox: ProcessSandbox) -> None:
    sandbox.load(
        [
            spec(
                "sometimes",
                """
                def sometimes(p, completion, e):
                    return None if completion == "skip" else True
                """,
            )
        ]
    )
    result = sandbox.score(text_batch("skip", "keep"))["sometimes"]
    assert result.scores == [None, 1.0] and result.errors == []


def test_exceptions_are_reported_per_sample_with_traceback(sandbox: ProcessSandbox) -> None:
    sandbox.load(
        [
            spec(
                "picky",
                """
                def picky(p, completion, e):
                    if completion == "bad":
                        raise ValueError("cannot score " + completion)
                    return 1.0
                """,
            )
        ]
    )
    result = sandbox.score(text_batch("ok", "bad", "ok"))["picky"]
    assert result.scores == [1.0, None, 1.0]
    (error,) = result.errors
    assert (error.kind, error.sample_index) == (RewardErrorKind.EXCEPTION, 1)
    assert error.message == "ValueError: cannot score bad"
    assert error.traceback is not None
    assert "line 4, in picky" in error.traceback and "raise ValueError" in error.traceback
    assert result.failed_samples == 1


def test_batch_exception_is_one_error_for_the_batch(sandbox: ProcessSandbox) -> None:
    sandbox.load([spec("broken", "def broken(prompts, completions, **kw):\n    return 1 / 0\n")])
    result = sandbox.score(text_batch("a", "b"))["broken"]
    assert result.scores == [None, None]
    (error,) = result.errors
    assert (error.kind, error.sample_index) == (RewardErrorKind.EXCEPTION, None)
    assert "ZeroDivisionError" in error.message
    assert result.failed_samples == 2


def test_invalid_returns_are_typed(sandbox: ProcessSandbox) -> None:
    sandbox.load(
        [
            spec(
                "odd",
                """
                VALUES = {"nan": float("nan"), "inf": float("inf"), "text": "0.5", "list": [1],
                          "int": 2, "bool": False}
                def odd(p, completion, e):
                    return VALUES[completion]
                """,
            ),
            spec(
                "odd_batch",
                """
                def odd_batch(prompts, completions, **kw):
                    return [1.0, float("-inf"), "x", None, 0, 1][: len(completions)]
                """,
            ),
        ]
    )
    results = sandbox.score(text_batch("nan", "inf", "text", "list", "int", "bool"))
    odd = results["odd"]
    assert odd.scores == [None, None, None, None, 2.0, 0.0]
    assert [(e.kind, e.sample_index) for e in odd.errors] == [
        (RewardErrorKind.INVALID_RETURN, index) for index in range(4)
    ]
    assert "nan" in odd.errors[0].message and "str" in odd.errors[2].message
    odd_batch = results["odd_batch"]
    assert odd_batch.scores == [1.0, None, None, None, 0.0, 1.0]
    assert [e.sample_index for e in odd_batch.errors] == [1, 2]


def test_wrong_length_and_non_list_batch_results(sandbox: ProcessSandbox) -> None:
    sandbox.load(
        [
            spec("short", "def short(prompts, completions, **kw):\n    return [1.0]\n"),
            spec("scalar", "def scalar(prompts, completions, **kw):\n    return 1.0\n"),
        ]
    )
    results = sandbox.score(text_batch("a", "b", "c"))
    (error,) = results["short"].errors
    assert error.kind == RewardErrorKind.WRONG_LENGTH and "1 scores for 3" in error.message
    assert results["short"].scores == [None] * 3
    assert results["scalar"].errors[0].kind == RewardErrorKind.INVALID_RETURN


def test_a_hung_function_costs_only_its_own_scores(sandbox: ProcessSandbox) -> None:
    sandbox.load(
        [
            LENGTH,
            spec(
                "stubborn",
                """
                import signal
                def stubborn(p, c, e):
                    # Ignores the soft timer and SIGTERM: only the parent's SIGKILL ends it.
                    signal.signal(signal.SIGALRM, signal.SIG_IGN)
                    signal.signal(signal.SIGTERM, signal.SIG_IGN)
                    while True:
                        pass
                """,
            ),
            spec("after", "def after(p, completion, e):\n    return 2.0\n"),
        ]
    )
    # stubborn never returns by itself: results at all are the parent's kill.
    results = sandbox.score(text_batch("abc", "d"))
    assert results["length"].scores == [3.0, 1.0]
    assert results["after"].scores == [2.0, 2.0]
    stubborn = results["stubborn"]
    assert stubborn.scores == [None, None]
    assert [(e.kind, e.sample_index) for e in stubborn.errors] == [(RewardErrorKind.TIMEOUT, None)]
    # The replacement process got the functions back and scores the next batch.
    assert_scores_normally(sandbox)


def test_soft_timeout_keeps_the_samples_scored_before_it(sandbox: ProcessSandbox) -> None:
    sandbox.load(
        [
            spec(
                "slow",
                """
                import time
                def slow(p, completion, e):
                    if completion == "slow":
                        time.sleep(60)
                    return 1.0
                """,
            )
        ]
    )
    result = sandbox.score(text_batch("fast", "slow", "fast"))["slow"]
    assert result.scores == [1.0, None, None]
    assert [(e.kind, e.sample_index) for e in result.errors] == [
        (RewardErrorKind.TIMEOUT, 1),
        (RewardErrorKind.TIMEOUT, 2),
    ]


def test_memory_hogs_are_contained(sandbox: ProcessSandbox) -> None:
    sandbox.load(
        [
            spec("big", "def big(p, c, e):\n    return len(bytearray(4 << 30))\n"),
            spec(
                "growing",
                """
                def growing(p, c, e):
                    hoard = []
                    while True:
                        hoard.append(bytearray(16 << 20))
                """,
            ),
        ]
    )
    results = sandbox.score(text_batch("a"))
    assert results["big"].errors[0].kind == RewardErrorKind.EXCEPTION
    assert "MemoryError" in results["big"].errors[0].message
    assert results["growing"].errors[0].kind in (RewardErrorKind.EXCEPTION, RewardErrorKind.KILLED)
    assert_scores_normally(sandbox)


def test_a_dying_process_is_reported_and_replaced(sandbox: ProcessSandbox) -> None:
    sandbox.load([spec("quitter", "import os\ndef quitter(p, c, e):\n    os._exit(3)\n"), LENGTH])
    results = sandbox.score(text_batch("a"))
    (error,) = results["quitter"].errors
    assert error.kind == RewardErrorKind.KILLED and "status 3" in error.message
    assert results["length"].scores == [1.0]
    sandbox.load([spec("sys_exit", "import sys\ndef sys_exit(p, c, e):\n    sys.exit(1)\n")])
    assert sandbox.score(text_batch("a"))["sys_exit"].errors[0].kind == RewardErrorKind.EXCEPTION


def test_logs_are_captured_per_function_and_bounded(sandbox: ProcessSandbox) -> None:
    sandbox.load(
        [
            spec(
                "chatty",
                """
                import os, sys
                def chatty(p, completion, e):
                    print("scoring", completion)
                    print("warning", file=sys.stderr)
                    os.write(1, b"raw fd write\\n")
                    return 1.0
                """,
            ),
            spec(
                "flood",
                """
                def flood(p, c, e):
                    line = "x" * (1 << 20)
                    for _ in range(1024):  # 1 GiB of output
                        print(line)
                    return 1.0
                """,
            ),
        ]
    )
    # A flood that took longer than CALL_TIMEOUT_S would time out: its scores below say not.
    results = sandbox.score(text_batch("a", "b"))
    chatty = results["chatty"]
    assert "scoring a\nwarning\nscoring b\nwarning\n" in chatty.logs
    assert chatty.logs.count("raw fd write") == 2 and not chatty.logs_truncated
    flood = results["flood"]
    assert flood.scores == [1.0, 1.0] and flood.logs_truncated
    assert len(flood.logs) < 1200 and "output truncated" in flood.logs
    # Logs belong to one batch: the next one starts empty.
    assert sandbox.score(text_batch("c"))["chatty"].logs.startswith("scoring c\n")


def test_reload_swaps_functions_in_the_same_warm_process(sandbox: ProcessSandbox) -> None:
    pid_source = "import os\ndef pid(p, c, e):\n    return os.getpid() * {factor}\n"
    sandbox.load([spec("pid", pid_source.format(factor=1)), LENGTH])
    first = sandbox.score(text_batch("a"))
    sandbox.load([spec("pid", pid_source.format(factor=-1), version=2)])
    second = sandbox.score(text_batch("a"))
    assert set(second) == {"pid"} and second["pid"].version == 2
    assert second["pid"].scores[0] == -first["pid"].scores[0]


def test_module_state_persists_between_batches(sandbox: ProcessSandbox) -> None:
    sandbox.load(
        [
            spec(
                "counter",
                "CALLS = []\ndef counter(p, c, e):\n    CALLS.append(1)\n    return len(CALLS)\n",
            )
        ]
    )
    sandbox.score(text_batch("a", "b"))
    assert sandbox.score(text_batch("a"))["counter"].scores == [3.0]


def test_code_that_fails_to_load_keeps_the_previous_functions(sandbox: ProcessSandbox) -> None:
    sandbox.load([LENGTH])
    broken = spec("broken", "import no_such_package_here\ndef broken(p, c, e):\n    return 1\n")
    with pytest.raises(RewardCodeError, match="ModuleNotFoundError") as caught:
        sandbox.load([broken])
    assert caught.value.function_name == "broken"
    with pytest.raises(RewardCodeError, match="syntax error at line 1"):
        sandbox.load([spec("typo", "def typo(p, c, e) return 1\n")])
    hangs = spec(
        "hangs",
        """
        import signal
        signal.signal(signal.SIGALRM, signal.SIG_IGN)
        while True:
            pass
        def hangs(p, c, e):
            return 1
        """,
    )
    with pytest.raises(RewardCodeError, match="loading failed"):
        sandbox.load([hangs])
    assert sandbox.score(text_batch("abcd"))["length"].scores == [4.0]


def test_environment_holds_only_the_jobs_variables(sandbox: ProcessSandbox) -> None:
    sandbox.load(
        [
            spec(
                "environment",
                """
                import os
                def environment(prompts, completions, **kw):
                    return [float(os.environ.get("JOB_TOKEN") == "job-token-value"),
                            float("RFT_TEST_WORKER_SECRET" in os.environ),
                            float(os.environ.get("HOME") == "/tmp")]
                """,
            )
        ]
    )
    assert sandbox.score(text_batch("a", "b", "c"))["environment"].scores == [1.0, 0.0, 1.0]


def test_numeric_libraries_default_to_one_thread_unless_the_job_says() -> None:
    settings = SandboxSettings(isolation="none", env={"OMP_NUM_THREADS": "4"})
    source = (
        "import os\n"
        "def threads(p, c, e):\n"
        "    return float(os.environ['OMP_NUM_THREADS'] + os.environ['OPENBLAS_NUM_THREADS'])\n"
    )
    with ProcessSandbox(settings) as sandbox:
        sandbox.load([spec("threads", source)])
        assert sandbox.score(text_batch("a"))["threads"].scores == [41.0]


def test_functions_spread_over_parallel_workers(tmp_path: Path) -> None:
    settings = SandboxSettings(isolation="none", workers=2, call_timeout_s=10, kill_grace_s=0.3)
    # Each function marks that it started, then waits for the other's mark: both can see each
    # other's only if they run at the same time (one worker would time out on the first).
    rendezvous = (
        "import os, pathlib, time\n"
        "def {name}(p, c, e):\n"
        "    folder = pathlib.Path({folder!r})\n"
        "    (folder / {name!r}).touch()\n"
        "    deadline = time.monotonic() + 5\n"
        "    while time.monotonic() < deadline:\n"
        "        if len(list(folder.iterdir())) == 2:\n"
        "            return os.getpid()\n"
        "        time.sleep(0.01)\n"
        "    return -1.0\n"
    )
    with ProcessSandbox(settings) as sandbox:
        sandbox.load(
            [
                spec(name, rendezvous.format(name=name, folder=str(tmp_path)))
                for name in ("one", "two")
            ]
        )
        results = sandbox.score(text_batch("a"))
        assert results["one"].scores[0] not in (None, -1.0), "the functions ran one after another"
        assert results["two"].scores[0] not in (None, -1.0)
        assert results["one"].scores != results["two"].scores  # two worker processes
        assert list(results) == ["one", "two"]


def test_mismatched_batch_is_a_caller_error(sandbox: ProcessSandbox) -> None:
    with pytest.raises(ValueError, match="must match"):
        sandbox.score(ScoringBatch(prompts=["a"], completions=["a", "b"], examples=[{}]))


def test_settings_reject_invalid_combinations() -> None:
    with pytest.raises(ValueError, match="allow_network"):
        SandboxSettings(isolation="none", allow_network=True)
    with pytest.raises(ValueError, match="call_timeout_s"):
        SandboxSettings(call_timeout_s=0)
    with pytest.raises(ValueError, match="PATH"):
        SandboxSettings(env={"PATH": "/evil"})


@needs_layer(BWRAP, f"bubblewrap unusable: {BWRAP.reason}")
def test_a_sandbox_that_cannot_start_says_why(tmp_path: Path) -> None:
    with pytest.raises(SandboxUnavailableError, match="its setup said: setpriv: failed to execute"):
        ProcessSandbox(SandboxSettings(isolation="bwrap", python_prefix=tmp_path))


def test_unusable_isolation_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    from sandbox import isolation

    isolation.detect_isolation.cache_clear()
    try:
        with pytest.raises(SandboxUnavailableError, match="apt-get install bubblewrap"):
            ProcessSandbox(SandboxSettings(isolation="bwrap"))
    finally:
        isolation.detect_isolation.cache_clear()


@pytest.mark.parametrize("isolation", MODES)
def test_job_packages_are_importable_and_the_workers_are_not(
    isolation: str, tmp_path: Path
) -> None:
    packages = tmp_path / "packages"
    (packages / "job_helpers").mkdir(parents=True)
    (packages / "job_helpers" / "__init__.py").write_text("BONUS = 0.25\n")
    settings = SandboxSettings(isolation=isolation, extra_python_paths=[packages])  # type: ignore[arg-type]
    with ProcessSandbox(settings) as sandbox:
        sandbox.load(
            [
                spec(
                    "imports",
                    """
                    import importlib.util
                    from job_helpers import BONUS
                    def imports(p, c, e):
                        # The worker's own stack (pytest, torch) is not on the child's path.
                        return BONUS + (importlib.util.find_spec("pytest") is not None)
                    """,
                )
            ]
        )
        assert sandbox.score(text_batch("a"))["imports"].scores == [0.25]


def test_close_leaves_no_process_behind() -> None:
    sandbox = ProcessSandbox(SandboxSettings(isolation="none", workers=2))
    pids = [worker.process.pid for worker in sandbox._workers if worker.process is not None]
    sandbox.close()
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists() or _is_zombie(pid)
    with pytest.raises(RuntimeError, match="closed"):
        sandbox.score(text_batch("a"))


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0] == b"Z"
    except OSError:
        return True
