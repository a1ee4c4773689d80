"""A worker's Prometheus metrics, served on RFT_WORKER_METRICS_PORT when it is set."""

from __future__ import annotations

from prometheus_client import Counter, Histogram, start_http_server

from workers.training.step_records import StepRecord

STEP_SECONDS = Histogram(
    "rft_step_duration_seconds",
    "Wall time of one training step, generation and scoring included",
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300),
)
STEPS = Counter("rft_steps_total", "Training steps recorded")
COMPLETIONS = Counter("rft_completions_total", "Completions scored and recorded")
REWARD_ERRORS = Counter(
    "rft_reward_errors_total", "Samples a reward function failed to score", ["function", "kind"]
)


def observe_step(record: StepRecord) -> None:
    STEP_SECONDS.observe(record.duration_s)
    STEPS.inc()
    COMPLETIONS.inc(len(record.completions))
    for name, result in record.function_results.items():
        for error in result.errors:
            REWARD_ERRORS.labels(name, error.kind.value).inc()


def serve_metrics(port: int | None, host: str = "127.0.0.1") -> None:
    if port:
        # prometheus_client's default is every interface, with no authentication.
        start_http_server(port, addr=host)
