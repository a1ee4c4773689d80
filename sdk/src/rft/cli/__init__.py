"""The ``rft`` command line (installed with the ``cli`` extra: typer, rich, pyyaml)."""

from __future__ import annotations

import sys


def main() -> None:
    try:
        from rft.cli.app import app
    except ImportError as error:
        sys.exit(f"the rft command needs the cli extra: pip install 'rft-sdk[cli]' ({error})")
    app()
