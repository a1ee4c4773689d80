"""Stop sequences with vLLM generating: vLLM stops at them, and the trainer's cut agrees."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.vllm_generation.test_vllm_training import train

pytestmark = pytest.mark.vllm

MAX_TOKENS = 24


def test_vllm_completions_end_at_their_first_stop_sequence(tmp_path: Path) -> None:
    stop = " "  # the tiny model writes words: unstopped, its 24-token completions hold several
    observer = train(
        tmp_path,
        train_steps=1,
        max_completion_length=MAX_TOKENS,
        stop=[stop],
        mask_truncated_completions=True,
    )

    completions = observer.records[0].completions
    stopped = [c for c in completions if stop in c.completion]
    assert len(stopped) >= 4, [c.completion for c in completions]
    for completion in stopped:
        # Generation ended at the first stop string: the token that completed it is the last.
        assert completion.completion.count(stop) == 1, completion.completion
        assert completion.token_count < MAX_TOKENS
