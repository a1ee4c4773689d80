"""Sampling whose randomness belongs to each completion, not to the process that samples it.

With ``reproducible_sampling``, a completion's tokens depend only on the job's seed, the step,
the completion's index in the step's global batch and the model: not on which rank generates
it, nor on which other completions share its ``generate()`` call. So the same job on 1 or N
devices samples the same completions (a process-wide torch RNG cannot do that: each rank draws
from its own stream, in an order set by its share of the batch).

How: the Gumbel-max trick. ``argmax(logits / T + G)`` with G standard Gumbel noise is a sample
of ``softmax(logits / T)``; greedy decoding over the filtered logits plus noise therefore
samples exactly what ``do_sample=True`` samples. The noise for (seed, step, sample, token
position, vocabulary id) comes from a counter-based integer hash computed on the logits'
device, a few vectorised ops over the (batch, vocab) scores per token: no per-row loop and no
generator state to save or split.
"""

from __future__ import annotations

import torch
from transformers import (
    LogitsProcessor,
    LogitsProcessorList,
    MinPLogitsWarper,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

_MASK_32 = 0xFFFFFFFF
# Multipliers of the 32-bit mixing rounds. Both below 2**31, so a 32-bit value times one stays
# within int64 (torch has no full uint64 arithmetic on every device) and the hash is exact.
_MULTIPLIER_A = 0x7FEB352D
_MULTIPLIER_B = 0x5BD1E995
# Separates the key fields so that (seed, step) = (1, 2) and (2, 1) hash apart.
_GOLDEN = 0x9E3779B9


def _mix_in_place(values: torch.Tensor) -> torch.Tensor:
    """One avalanche round over int64 values in [0, 2**32) (a lowbias32-style finalizer).

    In place: over a (batch, vocab) grid, fresh tensors per op cost half the time (measured on
    CPU). Callers pass a tensor of their own."""
    values ^= values >> 16
    values *= _MULTIPLIER_A
    values &= _MASK_32
    values ^= values >> 15
    values *= _MULTIPLIER_B
    values &= _MASK_32
    values ^= values >> 16
    return values


def _absorb(state: torch.Tensor, field: torch.Tensor | int) -> torch.Tensor:
    """A new state from ``state`` and ``field`` (broadcast together)."""
    combined = state + field
    combined += _GOLDEN
    combined &= _MASK_32
    return _mix_in_place(combined)


def keyed_uniform(
    *, seed: int, step: int, sample_indices: torch.Tensor, position: int, vocab_size: int
) -> torch.Tensor:
    """Uniform noise in (0, 1), shape (len(sample_indices), vocab_size), float32, on
    ``sample_indices``' device: element (i, v) depends only on (seed, step, sample_indices[i],
    position, v)."""
    device = sample_indices.device
    state = torch.tensor(seed & _MASK_32, dtype=torch.int64, device=device)
    for field in (seed >> 32, step, position):
        state = _absorb(state, field & _MASK_32)
    rows = _absorb(state, sample_indices.to(torch.int64) & _MASK_32)
    # Both sides mixed apart first (cheap: batch + vocab values), so that one round over the
    # (batch, vocab) grid, the part that costs, suffices.
    vocab = _mix_in_place(torch.arange(vocab_size, dtype=torch.int64, device=device))
    bits = _absorb(rows.unsqueeze(1), vocab.unsqueeze(0))
    bits >>= 9
    # 23 bits as odd multiples of 2**-24: every value, 1 - 2**-24 included, is exact in
    # float32, so neither 0 nor 1 occurs and the Gumbel transform below stays finite.
    return bits.to(torch.float32).mul_(2).add_(1).mul_(2.0**-24)


def keyed_gumbel(
    *, seed: int, step: int, sample_indices: torch.Tensor, position: int, vocab_size: int
) -> torch.Tensor:
    """Standard Gumbel noise keyed like ``keyed_uniform``."""
    uniform = keyed_uniform(
        seed=seed,
        step=step,
        sample_indices=sample_indices,
        position=position,
        vocab_size=vocab_size,
    )
    return uniform.log_().neg_().log_().neg_()


def sampling_warpers(
    *, temperature: float, top_k: int | None, top_p: float | None, min_p: float | None
) -> LogitsProcessorList:
    """The filters ``generate(do_sample=True)`` applies before it samples, in its order."""
    warpers = LogitsProcessorList()
    if temperature != 1.0:
        warpers.append(TemperatureLogitsWarper(temperature))
    if top_k:
        warpers.append(TopKLogitsWarper(top_k=top_k))
    if top_p is not None and top_p < 1.0:
        warpers.append(TopPLogitsWarper(top_p=top_p))
    if min_p is not None:
        warpers.append(MinPLogitsWarper(min_p=min_p))
    return warpers


class KeyedGumbelSampling(LogitsProcessor):
    """Turns greedy decoding into sampling keyed by each row's global sample index.

    Pass it to ``generate(do_sample=False, logits_processor=[...])``: it applies the sampling
    filters (temperature, top-k, top-p, min-p) itself, since greedy decoding skips them, then
    adds the row's Gumbel noise, so the argmax that greedy decoding takes is a sample.
    """

    def __init__(
        self,
        *,
        seed: int,
        step: int,
        sample_indices: torch.Tensor,
        prompt_length: int,
        warpers: LogitsProcessorList,
    ) -> None:
        self.seed = seed
        self.step = step
        self.sample_indices = sample_indices
        # The padded prompt's length: a row's token position counts from the end of it, so it
        # does not depend on how long the other prompts in the batch are.
        self.prompt_length = prompt_length
        self.warpers = warpers

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        filtered = self.warpers(input_ids, scores).float()
        noise = keyed_gumbel(
            seed=self.seed,
            step=self.step,
            sample_indices=self.sample_indices.to(filtered.device),
            position=input_ids.shape[1] - self.prompt_length,
            vocab_size=filtered.shape[-1],
        )
        # Filtered-out tokens stay at -inf, so the argmax never picks them.
        return filtered + noise  # type: ignore[return-value]
