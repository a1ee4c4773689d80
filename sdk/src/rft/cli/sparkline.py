"""Unicode sparklines for reward histories."""

from __future__ import annotations

from collections.abc import Sequence

BARS = "▁▂▃▄▅▆▇█"


def sparkline(values: Sequence[float | None]) -> str:
    """One bar per value scaled between the window's min and max; a gap for a missing value."""
    present = [value for value in values if value is not None]
    if not present:
        return " " * len(values)
    low, high = min(present), max(present)
    span = high - low
    bars = []
    for value in values:
        if value is None:
            bars.append(" ")
        elif span == 0:
            bars.append(BARS[len(BARS) // 2])  # A flat line, not the floor: nothing is "low".
        else:
            bars.append(BARS[round((value - low) / span * (len(BARS) - 1))])
    return "".join(bars)
