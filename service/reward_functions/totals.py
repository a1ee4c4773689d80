"""A sample's total reward from its functions' scores. Shared by the API (tests, dry runs)
and the worker; no torch here."""

from __future__ import annotations

import math
from collections.abc import Sequence


def weighted_total(scores: Sequence[float | None], weights: Sequence[float]) -> float | None:
    """Sum of weight * score over the functions that gave a score; None when none did.

    None (not 0) keeps an unscorable sample out of its group's baseline: TRL turns it into NaN
    and gives it advantage 0.
    """
    present = [w * s for s, w in zip(scores, weights, strict=True) if s is not None]
    return math.fsum(present) if present else None
