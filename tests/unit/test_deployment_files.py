"""The worker image and the compose file stay true to the project: the extras the image
installs exist, and a compose worker reserves as many GPUs as it offers a job."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

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


def compose_services() -> dict[str, Any]:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services: dict[str, Any] = compose["services"]
    return services


def with_defaults(value: str) -> str:
    """``value`` as compose reads it with no variable set: ``${NAME:-default}`` -> default."""
    return re.sub(r"\$\{[A-Z0-9_]+:-([^}]*)\}", r"\1", value)


def reserved_gpus(service: dict[str, Any]) -> tuple[list[str], set[str]]:
    """A service's GPU reservation: its device_ids as written, and the GPUs they name by
    default (Docker joins the entries with commas into NVIDIA_VISIBLE_DEVICES)."""
    (reservation,) = service["deploy"]["resources"]["reservations"]["devices"]
    assert reservation["driver"] == "nvidia" and reservation["capabilities"] == ["gpu"]
    # By count, Docker hands every service the same first GPUs.
    assert "count" not in reservation, "reserve GPUs by device_ids, not by count"
    written = [str(entry) for entry in reservation["device_ids"]]
    gpus = {gpu.strip() for entry in written for gpu in with_defaults(entry).split(",")}
    return written, gpus


def test_a_compose_worker_reserves_the_gpus_it_offers_a_job() -> None:
    worker = compose_services()["worker"]
    offered = worker["environment"]["RFT_WORKER_DEVICES"]
    written, gpus = reserved_gpus(worker)
    # The operator names the worker's GPUs; by default it offers a job as many as it reserves
    # (a worker offering more GPUs than it sees refuses to start: server.cli).
    assert written == ["${RFT_WORKER_GPUS:-0}"]
    assert offered == "${RFT_WORKER_DEVICES:-1}"
    assert int(with_defaults(offered)) == len(gpus)
    # DeepSpeed's op builds survive a restart.
    cache = worker["environment"]["TORCH_EXTENSIONS_DIR"]
    assert any(volume.endswith(f":{cache}") for volume in worker["volumes"])
    assert worker["shm_size"]


def test_the_worker_and_the_inference_service_get_gpus_of_their_own() -> None:
    services = compose_services()
    _, worker = reserved_gpus(services["worker"])
    written, inference = reserved_gpus(services["inference"])
    assert written == ["${RFT_INFERENCE_GPUS:-1}"]
    assert worker and inference
    assert worker.isdisjoint(inference), (worker, inference)
    # Only these two reserve GPUs.
    reserving = {name for name, service in services.items() if "deploy" in service}
    assert reserving == {"worker", "inference"}


def test_vllm_compile_caches_survive_a_restart() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    volumes = set()
    for name in ("worker", "inference"):
        service = compose["services"][name]
        cache = service["environment"]["VLLM_CACHE_ROOT"]
        (volume,) = [v.split(":")[0] for v in service["volumes"] if v.endswith(f":{cache}")]
        # A named volume (declared at the top level), not a folder in the container's layer.
        assert volume in compose["volumes"], volume
        volumes.add(volume)
    # One cache per service: two containers never write one at once.
    assert len(volumes) == 2


def test_an_exporter_takes_exports_only_with_the_artifacts_and_no_gpu() -> None:
    services = compose_services()
    exporter = services["exporter"]
    assert exporter["command"] == ["rft-server", "worker", "--exports-only"]
    assert exporter["build"]["dockerfile"] == "Dockerfile.worker"  # torch, peft, the hub client
    # It reads adapters from and writes archives to the artifact store the API streams from.
    artifacts = next(v for v in services["api"]["volumes"] if v.startswith("artifacts:"))
    assert artifacts in exporter["volumes"]
    assert "deploy" not in exporter  # merges on CPU: no GPU reserved


def test_the_compose_file_holds_no_credential() -> None:
    """Every password and token comes from .env or the environment (scripts/compose_env.sh),
    and compose refuses to start without it: no default anyone could read here."""
    text = (ROOT / "docker-compose.yml").read_text()
    services = compose_services()
    required = {name: f"${{{name}:?" for name in ("RFT_POSTGRES_PASSWORD", "RFT_REDIS_PASSWORD")}
    postgres = services["postgres"]["environment"]["POSTGRES_PASSWORD"]
    assert postgres.startswith(required["RFT_POSTGRES_PASSWORD"])
    assert services["redis"]["environment"]["REDISCLI_AUTH"].startswith(
        required["RFT_REDIS_PASSWORD"]
    )
    assert "--requirepass" in " ".join(services["redis"]["command"])
    for name in ("api", "worker", "inference"):
        environment = services[name]["environment"]
        assert f"rft:{required['RFT_POSTGRES_PASSWORD']}" in environment["RFT_DATABASE_URL"]
        assert f"redis://:{required['RFT_REDIS_PASSWORD']}" in environment["RFT_REDIS_URL"]
        assert environment["RFT_INFERENCE_TOKEN"].startswith("${RFT_INFERENCE_TOKEN:?")
    # No literal password anywhere (the old file had rft/rft), and no default for a secret.
    assert "rft:rft@" not in text and "POSTGRES_PASSWORD: rft" not in text
    assert not re.search(r"\$\{RFT_[A-Z_]*(PASSWORD|TOKEN)[A-Z_]*:-[^}]", text)
    script = (ROOT / "scripts" / "compose_env.sh").read_text()
    for name in ("RFT_POSTGRES_PASSWORD", "RFT_REDIS_PASSWORD", "RFT_INFERENCE_TOKEN"):
        assert name in script
