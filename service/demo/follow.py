"""The demo job, driven through the public HTTP API exactly as a user would."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx

from service.demo import DEMO_BASE_MODEL, DEMO_HYPERPARAMETERS, demo_reward_functions

DEMO_DIR = Path(__file__).resolve().parent
BARS = " ▁▂▃▄▅▆▇█"


def demo_job_request(dataset_id: str, *, train_steps: int = 20) -> dict[str, Any]:
    return {
        "name": "demo: write with the letter a",
        "dataset_id": dataset_id,
        "base_model": DEMO_BASE_MODEL,
        # One module holds both functions; each entry runs the function of its own name.
        "reward_functions": {
            spec.name: {"source": spec.source, "weight": spec.weight}
            for spec in demo_reward_functions()
        },
        "hyperparameters": {**DEMO_HYPERPARAMETERS, "train_steps": train_steps},
    }


def _bar(value: float | None, low: float = 0.0, high: float = 1.0) -> str:
    if value is None:
        return " "
    position = (min(max(value, low), high) - low) / (high - low)
    return BARS[round(position * (len(BARS) - 1))]


def run_demo(base_url: str, api_key: str, *, train_steps: int = 20) -> bool:
    """Upload the demo dataset, start the job, print each step's rewards. True on success."""
    headers = {"Authorization": f"Bearer {api_key}"}
    with httpx.Client(base_url=base_url, headers=headers, timeout=30) as http:
        with open(DEMO_DIR / "dataset.jsonl", "rb") as handle:
            response = http.post(
                "/v1/datasets", files={"file": ("demo.jsonl", handle)}, data={"name": "demo"}
            )
        response.raise_for_status()
        dataset = response.json()
        print(f"uploaded dataset {dataset['id']}: {dataset['row_count']} rows")
        response = http.post(
            "/v1/jobs", json=demo_job_request(dataset["id"], train_steps=train_steps)
        )
        response.raise_for_status()
        job = response.json()
        print(f"created job {job['id']} (status {job['status']})")
        steps_url = f"{base_url}/v1/jobs/{job['id']}/steps"
        print(f"follow it:  curl -H 'Authorization: Bearer {api_key}' {steps_url}\n")
        header = ("step", "reward", "std", "letter_fraction", "brevity", "s/step")
        print("{:>4}  {:>7}  {:>6}  {:>15}  {:>7}  {}".format(*header))
        seen = 0
        rewards: list[float] = []
        while True:
            steps = http.get(f"/v1/jobs/{job['id']}/steps", params={"after_step": seen}).json()
            for step in steps["data"]:
                seen = step["step"]
                reward = step["reward_mean"]
                rewards.append(reward if reward is not None else float("nan"))
                functions = step["reward_functions"]
                letters = functions.get("letter_fraction", {}).get("mean")
                brevity = functions.get("brevity", {}).get("mean")
                print(
                    f"{seen:>4}  {reward:>7.3f}  {step['reward_std'] or 0:>6.3f}  "
                    f"{letters or 0:>15.3f}  {brevity or 0:>7.3f}  {step['duration_s']:.2f}  "
                    f"{_bar(reward)}",
                    flush=True,
                )
            job = http.get(f"/v1/jobs/{job['id']}").json()
            ended = job["status"] in ("succeeded", "failed", "cancelled")
            if ended and not steps["has_more"] and seen >= job["steps_completed"]:
                break
            time.sleep(0.5)
    print(
        f"\njob {job['id']} {job['status']}"
        + (f": {job['failure_reason']}" if job["failure_reason"] else "")
    )
    if len(rewards) >= 10:
        first, last = rewards[:5], rewards[-5:]
        print(
            f"mean reward, first 5 steps: {sum(first) / 5:.3f}; last 5 steps: {sum(last) / 5:.3f}"
        )
    finite = [r for r in rewards if r == r]
    if finite:
        low, high = min(finite), max(finite)
        curve = "".join(_bar(r, low, high if high > low else low + 1) for r in rewards)
        print(f"reward curve ({low:.3f} .. {high:.3f}): {curve}")
    return bool(job["status"] == "succeeded")
