"""What the sandbox's interpreter runs: ``python -I -S -B start.py PROGRAM LIMITS``.

PROGRAM is a child program of this folder (``reward_child``, ``agent_child``), LIMITS the JSON
the child runtime reads (runtime.py). ``-I`` keeps this folder off ``sys.path`` and nothing of
the host's packages is visible, so this folder is made importable as a package of its own,
``rft_sandbox_child`` (a name no job's package takes; the host's ``sandbox`` package is not
inside the sandbox), and the program is imported from it like any module. Standard library only.
"""

import importlib
import os
import sys
import types

PACKAGE = "rft_sandbox_child"
PROGRAMS = ("reward_child", "agent_child")


def start() -> None:
    program = sys.argv.pop(1) if len(sys.argv) > 1 else ""
    if program not in PROGRAMS:
        raise SystemExit(f"usage: start.py {{{','.join(PROGRAMS)}}} LIMITS")
    package = types.ModuleType(PACKAGE)
    package.__path__ = [os.path.dirname(os.path.abspath(__file__))]
    sys.modules[PACKAGE] = package
    importlib.import_module(f"{PACKAGE}.{program}").main()


if __name__ == "__main__":
    start()
