"""Variables set in this process's environment for the length of a block, then put back."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping


@contextlib.contextmanager
def environment_for_block(variables: Mapping[str, str]) -> Iterator[None]:
    """Set ``variables``; afterwards restore each one's earlier value, or remove it."""
    previous = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
