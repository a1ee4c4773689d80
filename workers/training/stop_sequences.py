"""Cutting completions at stop sequences, the same way whichever engine generated them.

TRL 1.16 has no stop-string option of its own. vLLM can stop on strings (``SamplingParams.stop``
through GRPOConfig's ``generation_kwargs``), which saves generating past them; transformers'
``generate()`` can only with a tokenizer passed to it, which TRL does not pass. So the trainer
cuts every completion here, after generation: a completion keeps its tokens up to and including
the one that completes the first stop string. With transformers the tokens kept are exactly
those an early stop would have produced (a batch samples until its longest member ends anyway,
so nothing else changes); with vLLM the cut finds the stop vLLM already ended at.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence


def stop_length(
    token_ids: Sequence[int], decode: Callable[[Sequence[int]], str], stop: Sequence[str]
) -> int | None:
    """How many of ``token_ids`` to keep so the text ends at its first stop string; None when
    no stop string occurs. ``decode`` turns token ids into the text reward functions see."""

    def has_stop(length: int) -> bool:
        text = decode(token_ids[:length])
        return any(sequence in text for sequence in stop)

    if not stop or not token_ids or not has_stop(len(token_ids)):
        return None
    # The shortest prefix whose text holds a stop string: text grows with the prefix, so
    # "holds a stop string" flips once, and a binary search needs only log2(n) decodes.
    low, high = 1, len(token_ids)
    while low < high:
        middle = (low + high) // 2
        if has_stop(middle):
            high = middle
        else:
            low = middle + 1
    return high
