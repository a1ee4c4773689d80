"""Time per step of one job on 1 process, on 2 (DDP over gloo on CPU) and on 2 emulated
machines of 1 process each (num_nodes=2: two workers), same global batch (prompts_per_step x
num_generations completions per step), through the API. The 2-process job runs twice per
repetition: with its ranks forked from the worker's spare template (the default on a machine
without a GPU, workers.training.rank_processes) and under torchrun (RFT_SPARE_FORK=never), so
that what forking saves at the start (submit -> succeeded) is measured side by side.

A LocalStack per layout (RFT_WORKER_DEVICES, one worker per node), all three started before
any job runs; then, per repetition, one job on each layout in turn (1x1, 1x2, 2x1, 1x1, ...),
interleaved as every comparison in bench/README.md is, so that the shared machine's drifting
load falls on every layout alike. Each job asks for the layout's devices (num_devices,
num_nodes); the step rows' duration_s (generation, scoring, backward, recording) are compared,
the first step of each job left out.
On a 2-core machine 2 ranks cannot be faster: this measures what splitting costs.

Run: python bench/bench_multi_rank.py [--steps 8] [--repeats 3]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx
from synthetic import create_tenant_key, use_database  # type: ignore[import-not-found]

from service.stack import LocalStack
from tests.tiny import TINY_HYPERPARAMETERS

REWARD = (
    "def count_a(prompts, completions, **kwargs):\n    return [c.count('a') for c in completions]\n"
)


# (nodes, processes per node, RFT_SPARE_FORK): "auto" forks a job's ranks here (no GPU).
LAYOUTS = ((1, 1, "auto"), (1, 2, "auto"), (2, 1, "auto"), (1, 2, "never"))


@dataclass
class Layout:
    nodes: int
    processes: int
    spare_fork: str
    stack: LocalStack
    key: str
    durations: list[list[float]] = field(default_factory=list)  # per repetition, per step
    totals: list[float] = field(default_factory=list)  # submit -> succeeded, per repetition

    @property
    def name(self) -> str:
        launcher = (
            ""
            if self.processes * self.nodes == 1
            else (", torchrun" if self.spare_fork == "never" else ", forked ranks")
        )
        return f"{self.nodes} node(s) x {self.processes} process(es){launcher}"


def start_layout(
    stacks: contextlib.ExitStack, nodes: int, processes: int, spare_fork: str
) -> Layout:
    work = Path(tempfile.mkdtemp(prefix=f"rft-bench-ranks-{nodes}x{processes}-"))
    env = {
        "RFT_WORKER_DEVICES": str(processes),
        "RFT_WORKER_ADDRESS": "127.0.0.1",
        "RFT_SPARE_FORK": spare_fork,
        "OMP_NUM_THREADS": "1",
    }
    stack = stacks.enter_context(LocalStack(work / "stack", workers=nodes, extra_env=env))
    assert stack.database_url
    use_database(stack.database_url)
    _, key = create_tenant_key()
    return Layout(nodes, processes, spare_fork, stack, key)


def run(layout: Layout, steps: int) -> None:
    """One job on ``layout``'s stack; its step durations and submit-to-done time are kept."""
    headers = {"Authorization": f"Bearer {layout.key}"}
    with httpx.Client(base_url=layout.stack.base_url, headers=headers, timeout=60) as http:
        rows = "\n".join(f'{{"prompt": "Say {w}:"}}' for w in "abcdefgh").encode()
        dataset = http.post("/v1/datasets", files={"file": ("d.jsonl", rows)}).json()["id"]
        submitted = time.time()
        job = http.post(
            "/v1/jobs",
            json={
                "dataset_id": dataset,
                "num_devices": layout.processes,
                "num_nodes": layout.nodes,
                "reward_functions": {"count_a": {"source": REWARD}},
                "hyperparameters": {
                    **TINY_HYPERPARAMETERS,
                    "train_steps": steps,
                    "prompts_per_step": 2,
                    "num_generations": 8,
                    "checkpoint_every": steps,
                },
            },
        ).json()
        while (state := http.get(f"/v1/jobs/{job['id']}").json())["status"] not in (
            "succeeded",
            "failed",
            "cancelled",
        ):
            time.sleep(0.5)
        assert state["status"] == "succeeded", state
        layout.totals.append(time.time() - submitted)
        data = http.get(f"/v1/jobs/{job['id']}/steps").json()["data"]
        layout.durations.append([s["duration_s"] for s in data])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3, help="jobs per layout, interleaved")
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()}")
    with contextlib.ExitStack() as stacks:
        layouts = [start_layout(stacks, *layout) for layout in LAYOUTS]
        for repeat in range(args.repeats):
            # Round-robin, its starting layout rotated: no layout always runs first.
            start = repeat % len(layouts)
            for layout in layouts[start:] + layouts[:start]:
                run(layout, args.steps)
            print(f"repetition {repeat + 1}/{args.repeats} done, load {os.getloadavg()[0]:.1f}")
    base = layouts[0]
    for layout in layouts:
        later = [d for job in layout.durations for d in job[1:]]
        per_job = [statistics.median(job[1:]) for job in layout.durations]
        ratios = [
            statistics.median(job[1:]) / statistics.median(ones[1:])
            for job, ones in zip(layout.durations, base.durations, strict=True)
        ]
        print(
            f"{layout.name}: median step {statistics.median(later):.3f} s "
            f"(per repetition {[round(m, 3) for m in per_job]}; min {min(later):.3f}, "
            f"max {max(later):.3f}); vs 1x1 side by side {statistics.median(ratios):.2f}x "
            f"(per repetition {[round(r, 2) for r in ratios]}); first step "
            f"{statistics.median(job[0] for job in layout.durations):.3f} s; submit -> "
            f"succeeded {statistics.median(layout.totals):.1f} s"
        )
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
