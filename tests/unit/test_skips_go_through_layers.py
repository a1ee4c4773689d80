"""Every skip goes through tests/layers.py, which says what kind of thing is missing and turns
the skip into a failure where that kind is required (RFT_REQUIRE_ALL_LAYERS in CI,
RFT_REQUIRE_GPU in scripts/gpu_check.sh, RFT_REQUIRE_VLLM in the vLLM environments). A skip
written anywhere else would let a run pass without what it was meant to test."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.layers import MISSING_LAYER, needs_gpu, needs_layer, needs_vllm

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
# pytest.skip(...), pytest.importorskip(...), @pytest.mark.skip / skipif, pytest.xfail(...),
# and the same through `from pytest import skip` or a `mark` alias.
SKIP_CALL = re.compile(
    r"\bimportorskip\b|\bmark\s*\.\s*(skip|skipif|xfail)\b|\bpytest\s*\.\s*(skip|xfail)\b"
    r"|\bfrom\s+pytest\s+import\b[^\n]*\b(skip|xfail|importorskip)\b"
)


def skip_calls_outside_layers() -> list[str]:
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        if path == TESTS / "layers.py" or path == Path(__file__).resolve():
            continue
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if SKIP_CALL.search(line.split("#", 1)[0]):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    return found


def test_no_test_skips_except_through_tests_layers() -> None:
    assert skip_calls_outside_layers() == [], (
        "skip through tests/layers.py (needs_layer, needs_gpu, needs_vllm, ...) instead"
    )


def test_the_check_sees_each_way_of_skipping(tmp_path: Path) -> None:
    for line in (
        'pytest.skip("no")',
        'numpy = pytest.importorskip("numpy")',
        "@pytest.mark.skipif(True, reason='x')",
        "@pytest.mark.skip(reason='x')",
        "item.add_marker(pytest.mark.skip(reason=why))",
        "from pytest import skip",
        'pytest.xfail("flaky")',
    ):
        assert SKIP_CALL.search(line), line
    for line in ("skip_missing_layer('no')", "needs_gpu(problem)", "x = skipped_rows"):
        assert not SKIP_CALL.search(line), line


def kind_of(mark: object) -> str:
    name = getattr(mark, "name", "")
    if name == MISSING_LAYER:
        return "fail"
    return "skip" if name == "skip" else "run"


def test_a_skip_is_a_failure_only_where_its_kind_is_required(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("RFT_REQUIRE_ALL_LAYERS", "RFT_REQUIRE_GPUS", "RFT_REQUIRE_VLLM"):
        monkeypatch.delenv(name, raising=False)
    assert kind_of(needs_layer(True, "here")) == "run"
    assert kind_of(needs_layer(False, "gone")) == "skip"
    assert kind_of(needs_gpu("no CUDA")) == "skip"
    # CI: every layer required, but neither a GPU nor vLLM (the main .venv has none).
    monkeypatch.setenv("RFT_REQUIRE_ALL_LAYERS", "1")
    assert kind_of(needs_layer(False, "gone")) == "fail"
    assert kind_of(needs_gpu("no CUDA")) == "skip"
    assert kind_of(needs_vllm("not installed")) == "skip"
    # scripts/gpu_check.sh on one GPU: what one GPU fits must run, a 2-GPU test still skips.
    monkeypatch.setenv("RFT_REQUIRE_GPUS", "1")
    assert kind_of(needs_gpu("bitsandbytes is missing")) == "fail"
    assert kind_of(needs_gpu("needs 2 GPUs", gpus=2)) == "skip"
    monkeypatch.setenv("RFT_REQUIRE_VLLM", "1")
    assert kind_of(needs_vllm("not installed")) == "fail"
