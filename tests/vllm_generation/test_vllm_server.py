"""Server mode: the worker trains against a `trl vllm-serve` on a GPU of its own.

Runs only with CUDA: TRL sends each step's weights to the server over NCCL, which has no CPU
transport (on CPU the job is refused at start; see tests/unit/test_generation.py). NCCL also
refuses two ranks on one GPU, so the server needs a second GPU.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import torch

from service.base_models.built_in.tiny_model import ensure_tiny_model
from service.demo import demo_dataset
from service.embedded import free_port
from service.jobs.hyperparameters import Hyperparameters
from tests.layers import needs_gpu
from tests.tiny import TINY_HYPERPARAMETERS
from tests.training.harness import RecordingObserver, letter_config, reward_sandbox
from tests.vllm_generation.conftest import MODEL_CACHE_DIR
from tests.vllm_generation.test_vllm_training import LOGP_GAP, SYNCED_GAP_BOUND
from workers.training.generation import Generation, VllmServer
from workers.training.grpo import TrainingOutcome, TrainingSpec, run_grpo
from workers.training.step_records import StepRecord


def server_mode_problem() -> str | None:
    if not torch.cuda.is_available():
        return (
            "vLLM server mode needs CUDA: TRL syncs weights to the server over NCCL, which "
            "cannot run on CPU"
        )
    if torch.cuda.device_count() < 2:
        return "vLLM server mode needs two GPUs: NCCL refuses a server and a trainer on one"
    return None


pytestmark = [pytest.mark.vllm, needs_gpu(server_mode_problem(), gpus=2)]

SERVER_START_TIMEOUT_S = 600


@pytest.fixture
def vllm_server(tmp_path: Path) -> Iterator[VllmServer]:
    """`trl vllm-serve` with the tiny model on the last GPU; the trainer keeps GPU 0."""
    model_dir = ensure_tiny_model(MODEL_CACHE_DIR)
    port = free_port()
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": str(torch.cuda.device_count() - 1)}
    log = open(tmp_path / "vllm-serve.log", "wb")  # noqa: SIM115 - closed below
    server = subprocess.Popen(
        [
            str(Path(sys.executable).with_name("trl")), "vllm-serve",
            "--model", str(model_dir), "--host", "127.0.0.1", "--port", str(port),
            "--gpu_memory_utilization", "0.3", "--max_model_len", "512",
        ],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while True:
            assert server.poll() is None, (tmp_path / "vllm-serve.log").read_text()[-4000:]
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            assert time.monotonic() < deadline, "trl vllm-serve did not start"
            time.sleep(1)
        yield VllmServer(host="127.0.0.1", port=port, group_port=free_port(), timeout_s=120)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, 15)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, 9)
            server.wait()
        log.close()


def server_run(
    output_dir: Path, server: VllmServer, train_steps: int, observer: RecordingObserver
) -> TrainingOutcome:
    spec = TrainingSpec(
        base_model="rft-tiny",
        dataset=demo_dataset(),
        reward_config=letter_config(),
        hyperparameters=Hyperparameters.model_validate(
            {**TINY_HYPERPARAMETERS, "train_steps": train_steps, "seed": 0}
        ),
        output_dir=output_dir,
        model_cache_dir=MODEL_CACHE_DIR,
        generation=Generation(backend="vllm", device="cuda", mode="server", server=server),
    )
    sandbox = reward_sandbox()
    try:
        return run_grpo(spec, sandbox, observer)
    finally:
        sandbox.close()


class FailingObserver(RecordingObserver):
    """Records steps, and fails the run at ``fail_at`` (as a lost sandbox or database would)."""

    def __init__(self, fail_at: int) -> None:
        super().__init__()
        self.fail_at = fail_at

    def on_step(self, record: StepRecord) -> None:
        super().on_step(record)
        if record.step == self.fail_at:
            raise RuntimeError(f"step {record.step}: the run fails here")


@pytest.fixture
def closed_channels(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Each close of TRL's weight-sync channel (VLLMClient.close_communicator)."""
    from trl.generation.vllm_client import VLLMClient

    closes: list[str] = []
    close = VLLMClient.close_communicator

    def recorded(self: VLLMClient) -> None:
        closes.append("open" if self.communicator is not None else "closed already")
        close(self)

    monkeypatch.setattr(VLLMClient, "close_communicator", recorded)
    return closes


def test_a_run_trains_against_a_vllm_server(
    tmp_path: Path, vllm_server: VllmServer, closed_channels: list[str]
) -> None:
    observer = RecordingObserver()
    outcome = server_run(tmp_path / "run", vllm_server, 3, observer)
    assert closed_channels[:1] == ["open"]  # closed by run_grpo, not left to atexit
    assert outcome.steps_completed == 3
    assert [record.step for record in observer.records] == [1, 2, 3]
    # The server generated with the trainer's weights (sent over NCCL every step).
    gaps = [record.extra_metrics[LOGP_GAP] for record in observer.records]
    assert max(gaps) < SYNCED_GAP_BOUND, gaps


def test_after_a_failed_run_the_next_one_syncs_with_the_same_server(
    tmp_path: Path, vllm_server: VllmServer, closed_channels: list[str]
) -> None:
    """A run that fails half-way closes its weight-sync channel all the same, and the next
    run's init_communicator (a new NCCL group with the server) does not hang."""
    with pytest.raises(RuntimeError, match="step 2: the run fails here"):
        server_run(tmp_path / "failed", vllm_server, 4, FailingObserver(fail_at=2))
    assert closed_channels[:1] == ["open"]
    observer = RecordingObserver()
    outcome = server_run(tmp_path / "next", vllm_server, 2, observer)
    assert outcome.steps_completed == 2
    assert closed_channels[1:2] == ["open"]
    gaps = [record.extra_metrics[LOGP_GAP] for record in observer.records]
    assert max(gaps) < SYNCED_GAP_BOUND, gaps
