"""Merged export: time and peak memory (RSS) of each part, for the built-in tiny model and a
random Qwen2 of Qwen2.5-0.5B's layer shapes.

Each export runs as a worker runs it (workers.export): the merge in a child process
(``run_merge``: load the base model in the export's dtype, apply a LoRA adapter of rank 16 on
every linear layer, merge_and_unload, save safetensors and the tokenizer), then the archive
(``pack``: .tar.gz at gzip level 1, the default, and at level 0) and one full read of it as the
API streams a download (``LocalArtifactStore.read_file``). Each export is measured in a fresh
process: its own peak RSS is the worker's side (packing, streaming), its child's the merge's.

Run: python bench/bench_export.py   (~8 min on 2 shared cores)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from random_qwen2 import HALF_B_MODEL, build_random_qwen2  # type: ignore[import-not-found]
from variants import child_result  # type: ignore[import-not-found]

LORA_RANK = 16


def build_adapter(base: Path, directory: Path) -> Path:
    """A LoRA adapter on every linear layer with random (non-zero) weights, as jobs train."""
    if (directory / "adapter_config.json").is_file():
        return directory
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(base)
    config = LoraConfig(
        r=LORA_RANK, lora_alpha=2 * LORA_RANK, target_modules="all-linear", init_lora_weights=False
    )
    get_peft_model(model, config).save_pretrained(str(directory))
    return directory


def _status_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def _folder_mb(folder: Path) -> float:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file()) / 1e6


def run_export(args: argparse.Namespace) -> None:
    """In the child: the worker's steps, timed; one JSON line."""
    from service.artifacts.storage import LocalArtifactStore
    from workers.export import Progress, pack, run_merge

    class StageClock(Progress):
        def __init__(self) -> None:
            self.started: dict[str, float] = {}

        def stage(self, stage: Any, share: float = 0.0) -> None:
            self.started.setdefault(str(stage), time.perf_counter())

    rss_before = _status_mb("VmRSS")
    with tempfile.TemporaryDirectory() as scratch:
        merged = Path(scratch) / "merged"
        clock = StageClock()
        started = time.perf_counter()
        run_merge(str(args.model), args.adapter, merged, args.dtype, clock)
        merge_s = time.perf_counter() - started
        merge_peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        # From the start to the first stage: the child's imports (torch, transformers, peft).
        marks = [("start", started), *clock.started.items(), ("end", started + merge_s)]
        stage_s = {name: round(marks[i + 1][1] - at, 1) for i, (name, at) in enumerate(marks[:-1])}

        result: dict[str, Any] = {
            "merge_s": merge_s,
            "stage_s": stage_s,
            "merge_peak_rss_mb": merge_peak_mb,
            "merged_mb": _folder_mb(merged),
            "worker_rss_before_mb": rss_before,
        }
        for level in (1, 0):
            archive = Path(scratch) / f"merged-{level}.tar.gz"
            started = time.perf_counter()
            pack(merged, archive, "merged", lambda share: None, compress_level=level)
            result[f"pack_s_{level}"] = time.perf_counter() - started
            result[f"archive_mb_{level}"] = archive.stat().st_size / 1e6
            started = time.perf_counter()
            pieces = LocalArtifactStore(archive.parent).read_file(str(archive))
            result[f"streamed_mb_{level}"] = sum(len(piece) for piece in pieces) / 1e6
            result[f"stream_s_{level}"] = time.perf_counter() - started
            archive.unlink()
        result["worker_peak_rss_mb"] = _status_mb("VmHWM")
        print(json.dumps(result))


def measure(model: Path, adapter: Path, dtype: str) -> dict[str, Any]:
    command = [__file__, "--child", "--model", str(model)]
    command += ["--adapter", str(adapter), "--dtype", dtype]
    return child_result(command, what=model.name)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--model", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--adapter", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--dtype", default="auto", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        run_export(args)
        return

    from service.base_models.built_in.tiny_model import ensure_tiny_model

    root = Path(tempfile.gettempdir())
    tiny = ensure_tiny_model(root / "rft-bench-models")
    qwen = build_random_qwen2(root / "rft-bench-qwen2-05b", HALF_B_MODEL)
    exports = [
        ("rft-tiny", tiny, "auto"),
        ("0.5B layers", qwen, "auto"),
        ("0.5B layers", qwen, "bfloat16"),
    ]
    print(f"load {os.getloadavg()[0]:.1f}; LoRA rank {LORA_RANK} on every linear layer")
    print(
        f"{'model':<12} {'dtype':<8} {'merged MB':>9} {'merge s':>7} {'merge peak RSS MB':>17} "
        f"{'gzip':>4} {'archive MB':>10} {'pack s':>6} {'stream s':>8} {'worker RSS MB':>13}"
    )
    for name, model, dtype in exports:
        adapter = build_adapter(model, model.with_name(model.name + "-adapter"))
        run = measure(model, adapter, dtype)
        worker = f"{run['worker_rss_before_mb']:.0f} -> {run['worker_peak_rss_mb']:.0f}"
        for level in (1, 0):
            merge = (
                f"{run['merged_mb']:>9.1f} {run['merge_s']:>7.1f} {run['merge_peak_rss_mb']:>17.0f}"
                if level == 1
                else f"{'':>9} {'':>7} {'':>17}"
            )
            print(
                f"{name:<12} {dtype:<8} {merge} {level:>4} {run[f'archive_mb_{level}']:>10.1f} "
                f"{run[f'pack_s_{level}']:>6.1f} {run[f'stream_s_{level}']:>8.2f} "
                f"{worker if level == 1 else '':>13}"
            )
        print(f"{'':<21} merge stages (s): {run['stage_s']}")
    print(f"load at end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
