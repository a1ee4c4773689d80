"""Time per step of one job on 1 process, on 2 (torchrun, DDP over gloo on CPU) and on 2
emulated machines of 1 process each (num_nodes=2: two workers, torchrun --nnodes 2), same
global batch (prompts_per_step x num_generations completions per step), through the API.

A LocalStack per layout (RFT_WORKER_DEVICES, one worker per node), one job asking for that
many devices (num_devices, num_nodes) each; the step rows' duration_s (generation, scoring,
backward, recording) are compared, the first step left out.
On a 2-core machine 2 ranks cannot be faster: this measures what splitting costs.

Run: python bench/bench_multi_rank.py [--steps 8]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx
from synthetic import create_tenant_key, use_database  # type: ignore[import-not-found]

from service.stack import LocalStack
from tests.tiny import TINY_HYPERPARAMETERS

REWARD = (
    "def count_a(prompts, completions, **kwargs):\n    return [c.count('a') for c in completions]\n"
)


def run(processes: int, steps: int, nodes: int = 1) -> tuple[list[float], float]:
    work = Path(tempfile.mkdtemp(prefix=f"rft-bench-ranks-{nodes}x{processes}-"))
    env = {
        "RFT_WORKER_DEVICES": str(processes),
        "RFT_WORKER_ADDRESS": "127.0.0.1",
        "OMP_NUM_THREADS": "1",
    }
    with LocalStack(work / "stack", workers=nodes, extra_env=env) as stack:
        assert stack.database_url
        use_database(stack.database_url)
        _, key = create_tenant_key()
        headers = {"Authorization": f"Bearer {key}"}
        with httpx.Client(base_url=stack.base_url, headers=headers, timeout=60) as http:
            rows = "\n".join(f'{{"prompt": "Say {w}:"}}' for w in "abcdefgh").encode()
            dataset = http.post("/v1/datasets", files={"file": ("d.jsonl", rows)}).json()["id"]
            submitted = time.time()
            job = http.post(
                "/v1/jobs",
                json={
                    "dataset_id": dataset,
                    "num_devices": processes,
                    "num_nodes": nodes,
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
            total = time.time() - submitted
            data = http.get(f"/v1/jobs/{job['id']}/steps").json()["data"]
            return [s["duration_s"] for s in data], total


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=8)
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()}")
    for nodes, processes in ((1, 1), (1, 2), (2, 1)):
        durations, total = run(processes, args.steps, nodes)
        later = durations[1:]
        print(
            f"{nodes} node(s) x {processes} process(es): "
            f"median step {statistics.median(later):.3f} s "
            f"(min {min(later):.3f}, max {max(later):.3f}; first step {durations[0]:.3f} s); "
            f"submit -> succeeded {total:.1f} s"
        )
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
