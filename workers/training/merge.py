"""A LoRA adapter merged into its base model: a plain Hugging Face model folder in safetensors.

``merge_adapter`` is the plain function (tests and benchmarks call it). A worker runs it in a
child process (``python -m workers.training.merge SPEC``: a JSON spec, whose ``stages_fd`` is
a pipe that hears one JSON line per stage): a merge holds the whole base model in memory, so
a model too large for the machine ends that process, not the worker, and the memory goes
back when it exits.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Files of the adapter folder that say it carries its own tokenizer (training saves the one
# it used, chat template included, beside each checkpoint).
TOKENIZER_CONFIG = "tokenizer_config.json"


def merge_adapter(
    base_model: str,
    adapter_dir: Path,
    out_dir: Path,
    *,
    dtype: str = "auto",
    report: Callable[[str], None] = lambda stage: None,
) -> None:
    """Load ``base_model`` (a folder or hub id) in ``dtype`` ("auto": its own), apply the
    adapter in ``adapter_dir``, fold it into the weights and save the result, with the
    tokenizer, in ``out_dir``. ``report`` hears each stage as it starts."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    report("loading")
    torch_dtype: Any = "auto" if dtype == "auto" else getattr(torch, dtype)
    base = AutoModelForCausalLM.from_pretrained(base_model, dtype=torch_dtype)
    adapted = PeftModel.from_pretrained(base, str(adapter_dir))
    report("merging")
    merged: Any = adapted.merge_and_unload()
    report("saving")
    out_dir.mkdir(parents=True, exist_ok=True)
    merged.save_pretrained(out_dir, safe_serialization=True)
    has_tokenizer = (adapter_dir / TOKENIZER_CONFIG).is_file()
    tokenizer = AutoTokenizer.from_pretrained(str(adapter_dir) if has_tokenizer else base_model)
    tokenizer.save_pretrained(out_dir)


def main() -> int:
    spec = json.loads(sys.argv[1])
    with os.fdopen(spec["stages_fd"], "w") as stages:

        def report(stage: str) -> None:
            stages.write(json.dumps({"stage": stage}) + "\n")
            stages.flush()

        merge_adapter(
            spec["base_model"],
            Path(spec["adapter_dir"]),
            Path(spec["out_dir"]),
            dtype=spec["dtype"],
            report=report,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
