"""The worker image and the compose file stay true to the project: the extras the image
installs exist, and a compose worker reserves as many GPUs as it offers a job."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def test_the_worker_image_installs_extras_that_exist_deepspeed_among_them() -> None:
    dockerfile = (ROOT / "Dockerfile.worker").read_text()
    (extras,) = re.findall(r'pip install [^\n]*"\.\[([a-z0-9,-]+)\]"', dockerfile)
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert set(extras.split(",")) <= set(declared)
    assert "deepspeed" in extras.split(",")
    assert "ENV" in dockerfile and "RFT_WORKER_DEVICES=${RFT_WORKER_DEVICES}" in dockerfile


def test_a_compose_worker_reserves_the_gpus_it_offers_a_job() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    worker = compose["services"]["worker"]
    offered = worker["environment"]["RFT_WORKER_DEVICES"]
    (reservation,) = worker["deploy"]["resources"]["reservations"]["devices"]
    # One variable for both: a worker offering more GPUs than it sees would take jobs it
    # cannot run.
    assert offered == reservation["count"] == "${RFT_WORKER_DEVICES:-1}"
    # DeepSpeed's op builds survive a restart.
    cache = worker["environment"]["TORCH_EXTENSIONS_DIR"]
    assert any(volume.endswith(f":{cache}") for volume in worker["volumes"])
    assert worker["shm_size"]
