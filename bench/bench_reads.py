"""Read latency at scale: a 1000-step job with 256k completions, 200 concurrent clients.

Loads a synthetic job straight into Postgres (COPY), then starts the API as `rft-server api`
runs it, in one process and with `--workers 2`, side by side. For each endpoint it measures
- unloaded: one client, requests one after another (p50/p99);
- loaded: 200 concurrent connections for a few seconds (wrk when installed, else an asyncio +
  httpx load generator), p50/p99 and requests/s; endpoints interleaved across servers.
Then EXPLAIN ANALYZE of the completions queries, and where a steps request spends its time
(in-process: SQL + ORM, pydantic validation, JSON encoding).

Run: python bench/bench_reads.py [--seconds 8] [--connections 200]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import contextlib

import httpx
from sqlalchemy import select, text
from synthetic import (  # type: ignore[import-not-found]
    create_running_job,
    create_tenant_key,
    embedded_postgres,
    make_step_record,
)

from service.bulk import copy_lines
from service.db import session_scope
from service.embedded import free_port
from service.jobs.step_repository import COMPLETION_COLUMNS
from workers.step_store import completion_copy_lines, record_step

STEPS = 1000
COMPLETIONS_PER_STEP = 256
EVENTS = 2000
WRK_SCRIPT = """
local paths = {}
init = function(args)
  for i, p in ipairs(args) do paths[i] = p end
end
request = function()
  return wrk.format("GET", paths[math.random(#paths)])
end
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("RESULT %d %d %d %d %d %d\\n", summary.requests, summary.duration,
    latency:percentile(50), latency:percentile(99), latency.max,
    e.connect + e.read + e.write + e.status + e.timeout))
end
"""


def load_job(tenant_id: str) -> str:
    """1000 steps, 256 completions each, 2000 events: COPY, a few seconds."""
    job_id = create_running_job(tenant_id)
    started = time.perf_counter()
    template = make_step_record(1, completions=COMPLETIONS_PER_STEP)
    for step in range(1, STEPS + 1):
        template.step = step
        with session_scope() as session:
            if step == 1:
                record_step(session, job_id, template)
                continue
            # The step row and job row as the recorder writes them; completions by raw COPY
            # of the same encoded lines (regenerating 256k texts would dominate the load).
            record_step(session, job_id, _without_completions(template))
            raw = session.connection().connection.driver_connection
            with raw.cursor() as cursor:  # type: ignore[union-attr]
                copy_lines(
                    cursor,
                    "completions",
                    COMPLETION_COLUMNS,
                    completion_copy_lines(job_id, template),
                )
    with session_scope() as session:
        session.execute(
            text(
                "INSERT INTO job_events (job_id, kind, message, step, data, created_at) "
                "SELECT :job, 'checkpoint', 'checkpoint saved at step ' || g, g, "
                "jsonb_build_object('path', '/artifacts/checkpoint-' || g), now() "
                "FROM generate_series(1, :n) g"
            ),
            {"job": job_id, "n": EVENTS},
        )
        session.execute(text("ANALYZE"))
    print(
        f"loaded {STEPS} steps, {STEPS * COMPLETIONS_PER_STEP} completions, {EVENTS} events "
        f"in {time.perf_counter() - started:.1f} s"
    )
    return job_id


def _without_completions(record: Any) -> Any:
    from dataclasses import replace

    return replace(record, completions=[], function_results={})


@dataclass
class Server:
    name: str
    args: list[str]
    port: int
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def server_configs() -> list[Server]:
    command = [str(Path(sys.executable).parent / "rft-server"), "api", "--host", "127.0.0.1"]
    return [
        Server(name, [*args, "--port", str(port)], port)
        for name, args, port in (
            ("rft-server api", command, free_port()),
            ("rft-server api --workers 2", [*command, "--workers", "2"], free_port()),
        )
    ]


def start_server(server: Server, database_url: str, log_dir: Path) -> None:
    env = {**os.environ, "RFT_DATABASE_URL": database_url, "PYTHONUNBUFFERED": "1"}
    env.pop("RFT_REDIS_URL", None)  # reads need no broker
    log = open(log_dir / f"api-{server.port}.log", "ab")  # noqa: SIM115 - the child owns it
    server.process = subprocess.Popen(
        server.args,
        env=env,
        cwd=Path(__file__).resolve().parents[1],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{server.url}/readyz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{server.name} did not start; see {log_dir}")
        time.sleep(0.2)


def stop_server(server: Server) -> None:
    if server.process is None:
        return
    if server.process.poll() is None:
        os.killpg(server.process.pid, 15)
    try:
        server.process.wait(timeout=20)
    except subprocess.TimeoutExpired:  # stuck on the pool deadlock: it would never exit
        os.killpg(server.process.pid, 9)
        server.process.wait()


def settle(server: Server, limit_s: float = 180) -> float:
    """Wait until the server has worked off requests whose clients gave up; seconds waited.

    wrk closes its connections at the end of a run, but the server still runs what it had
    accepted: without this the next run would measure the previous one's backlog.
    """
    started = time.monotonic()
    while time.monotonic() - started < limit_s:
        probe = time.perf_counter()
        with contextlib.suppress(httpx.HTTPError):
            httpx.get(f"{server.url}/healthz", timeout=limit_s)
        if time.perf_counter() - probe < 0.05:
            break
        time.sleep(0.5)
    return time.monotonic() - started


def log_errors(log: Path) -> str:
    """The distinct errors a server logged, counted (what the loaded runs' errors were)."""
    counts: dict[str, int] = {}
    for line in log.read_text(errors="replace").splitlines():
        for marker in ("QueuePool limit", "too many clients", "TimeoutError"):
            if marker in line:
                counts[marker] = counts.get(marker, 0) + 1
                break
    return ", ".join(f"{name!r} x{count}" for name, count in counts.items()) or "none"


def endpoints(job_id: str) -> dict[str, list[str]]:
    """Per endpoint, the request paths to draw from."""
    with session_scope() as session:
        first_ids: dict[int, int] = dict(
            session.execute(  # type: ignore[arg-type]
                text("SELECT step, min(id) FROM completions WHERE job_id = :j GROUP BY step"),
                {"j": job_id},
            ).all()
        )
    rng = random.Random(0)
    steps = rng.sample(range(1, STEPS + 1), 100)
    base = f"/v1/jobs/{job_id}"
    return {
        "steps (all 1000)": [f"{base}/steps"],
        "completions ?step=N&limit=50": [f"{base}/completions?step={s}&limit=50" for s in steps],
        "completions ?step=N&after= (page 5)": [
            f"{base}/completions?step={s}&limit=50&after={s}:{first_ids[s] + 199}" for s in steps
        ],
        "completions ?after= deep, no step": [
            f"{base}/completions?limit=50&after={s}:{first_ids[s] + 100}" for s in steps
        ],
        "events/history (limit 50, deep)": [
            f"{base}/events/history?limit=50&after={rng.randrange(EVENTS)}" for _ in range(100)
        ],
    }


def unloaded(client: httpx.Client, paths: list[str], count: int) -> tuple[float, float]:
    latencies = []
    for i in range(count):
        started = time.perf_counter()
        response = client.get(paths[i % len(paths)])
        latencies.append(time.perf_counter() - started)
        response.raise_for_status()
    return _percentile(latencies, 50), _percentile(latencies, 99)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


@dataclass
class Load:
    requests_per_s: float
    p50_s: float
    p99_s: float
    errors: int


def loaded_wrk(
    url: str, key: str, paths: list[str], seconds: float, connections: int, script: Path
) -> Load:
    result = subprocess.run(
        [
            "wrk", "-t2", f"-c{connections}", f"-d{round(seconds)}s", "--timeout", "10s",
            "-H", f"Authorization: Bearer {key}", "-s", str(script), url, "--", *paths,
        ],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    line = next(line for line in result.stdout.splitlines() if line.startswith("RESULT"))
    requests, duration_us, p50, p99, _, errors = (int(v) for v in line.split()[1:])
    return Load(requests / (duration_us / 1e6), p50 / 1e6, p99 / 1e6, errors)


def loaded_httpx(url: str, key: str, paths: list[str], seconds: float, connections: int) -> Load:
    async def run() -> Load:
        latencies: list[float] = []
        errors = 0
        deadline = time.perf_counter() + seconds
        limits = httpx.Limits(max_connections=connections)
        headers = {"Authorization": f"Bearer {key}"}
        async with httpx.AsyncClient(base_url=url, headers=headers, limits=limits) as client:

            async def one_client(seed: int) -> None:
                nonlocal errors
                rng = random.Random(seed)
                while time.perf_counter() < deadline:
                    started = time.perf_counter()
                    response = await client.get(rng.choice(paths), timeout=30)
                    latencies.append(time.perf_counter() - started)
                    errors += response.status_code != 200

            started = time.perf_counter()
            await asyncio.gather(*(one_client(i) for i in range(connections)))
            elapsed = time.perf_counter() - started
        return Load(
            len(latencies) / elapsed, _percentile(latencies, 50), _percentile(latencies, 99), errors
        )

    return asyncio.run(run())


def explain(job_id: str) -> None:
    print("\n== query plans (EXPLAIN ANALYZE, as the repository issues them) ==")
    with session_scope() as session:
        page_5 = session.scalar(
            text("SELECT min(id) + 199 FROM completions WHERE job_id = :j AND step = 500"),
            {"j": job_id},
        )
        deep = session.scalar(
            text("SELECT min(id) + 100 FROM completions WHERE job_id = :j AND step = 800"),
            {"j": job_id},
        )
        # The repository's keyset: ORDER BY step, id with a (step, id) row comparison.
        for title, where in (
            ("?step=500&limit=50", "job_id = :j AND step = 500"),
            ("?step=500&after=<page 5>", "job_id = :j AND step = 500 AND (step, id) > (500, :p)"),
            ("?after=<step 800, row 100>, no step", "job_id = :j AND (step, id) > (800, :d)"),
        ):
            plan = session.execute(
                text(
                    "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) SELECT * FROM completions "
                    f"WHERE {where} ORDER BY step, id LIMIT 51"
                ),
                {"j": job_id, "p": page_5, "d": deep},
            ).scalars()
            print(f"-- {title}")
            for line in plan:
                print("   " + line)


def profile_steps(tenant_id: str, job_id: str, rounds: int = 20) -> None:
    """One steps request, in parts: what the endpoint does, timed piece by piece."""
    from pydantic import TypeAdapter

    from service.jobs import service
    from service.jobs.schemas import Step
    from service.jobs.step_json import steps_page_json
    from service.jobs.step_repository import StepRepository
    from service.models import Step as StepRow
    from service.pagination import Page, paginate

    adapter: TypeAdapter[Page[Step]] = TypeAdapter(Page[Step])
    parts: dict[str, list[float]] = {
        "before: SQL, plain rows (1000 steps)": [],
        "before: pydantic Page[Step] from rows": [],
        "before: FastAPI validate + dump_json": [],
        "now: SQL, reward_functions as JSON text": [],
        "now: JSON written from the rows": [],
    }
    before: list[float] = []
    now: list[float] = []
    for _ in range(rounds):  # interleaved: the old path, then the endpoint's path
        with session_scope() as session:
            started = time.perf_counter()
            # The endpoint before: every column decoded by psycopg, then pydantic.
            service.get_job(session, tenant_id, job_id)
            rows = (
                session.execute(
                    select(StepRow.__table__)
                    .where(StepRow.job_id == job_id)
                    .order_by(StepRow.step)
                    .limit(1001)
                )
                .mappings()
                .all()
            )
            parts["before: SQL, plain rows (1000 steps)"].append(time.perf_counter() - started)
            started = time.perf_counter()
            page = paginate(rows, 1000, Step, lambda item: item.step)
            parts["before: pydantic Page[Step] from rows"].append(time.perf_counter() - started)
        started = time.perf_counter()
        old_json = adapter.dump_json(adapter.validate_python(page))
        parts["before: FastAPI validate + dump_json"].append(time.perf_counter() - started)
        with session_scope() as session:
            started = time.perf_counter()
            service.get_job(session, tenant_id, job_id)
            raw = StepRepository(session).list_steps(job_id, after_step=0, limit=1001)
            parts["now: SQL, reward_functions as JSON text"].append(time.perf_counter() - started)
            started = time.perf_counter()
            new_json = steps_page_json(raw, 1000)
            parts["now: JSON written from the rows"].append(time.perf_counter() - started)
        assert json.loads(new_json) == json.loads(old_json), "the two paths disagree"
    print("\n== one GET /steps (1000 steps) in parts, in-process, medians ==")
    for name, values in parts.items():
        print(f"{name:<44} {statistics.median(values) * 1000:>7.2f} ms")
    for name, values in parts.items():
        (before if name.startswith("before") else now).append(statistics.median(values))
    print(f"{'ratio before/now':<44} {sum(before) / sum(now):>7.2f} x")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=8)
    parser.add_argument("--connections", type=int, default=200)
    parser.add_argument("--unloaded", type=int, default=100, help="requests per endpoint")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    print(f"load average at start: {os.getloadavg()}")
    work = Path(tempfile.mkdtemp(prefix="rft-bench-reads-"))
    with embedded_postgres() as database_url:
        tenant_id, key = create_tenant_key()
        job_id = load_job(tenant_id)
        explain(job_id)
        profile_steps(tenant_id, job_id)
        paths = endpoints(job_id)
        script = work / "paths.lua"
        script.write_text(WRK_SCRIPT)
        wrk = shutil.which("wrk") is not None
        generator = "wrk -t2" if wrk else "asyncio + httpx"
        print(f"\n== latency: unloaded (1 client, {args.unloaded} requests) and loaded ")
        print(f"   ({args.connections} connections, {args.seconds:.0f} s, {generator}) ==")
        print(
            f"{'endpoint':<38} {'server':<40} {'1 client p50/p99 ms':>20} "
            f"{'loaded p50/p99 ms':>18} {'req/s':>7} {'errors':>6} {'drain s':>7}"
        )
        # One server at a time: each holds up to 30 connections per process, and Postgres
        # allows 100. Every endpoint unloaded first: a stuck server would spoil those too.
        for server in server_configs():
            start_server(server, database_url, work)
            try:
                headers = {"Authorization": f"Bearer {key}"}
                quiet: dict[str, tuple[float, float]] = {}
                with httpx.Client(base_url=server.url, headers=headers, timeout=30) as http:
                    for endpoint, endpoint_paths in paths.items():
                        unloaded(http, endpoint_paths, 5)  # connections, caches
                        quiet[endpoint] = unloaded(http, endpoint_paths, args.unloaded)
                for endpoint, endpoint_paths in paths.items():
                    if wrk:
                        load = loaded_wrk(
                            server.url, key, endpoint_paths, args.seconds, args.connections, script
                        )
                    else:
                        load = loaded_httpx(
                            server.url, key, endpoint_paths, args.seconds, args.connections
                        )
                    drained = settle(server)
                    p50, p99 = quiet[endpoint]
                    print(
                        f"{endpoint:<38} {server.name:<40} {p50 * 1000:>9.1f}/{p99 * 1000:<9.1f} "
                        f"{load.p50_s * 1000:>8.1f}/{load.p99_s * 1000:<8.1f} "
                        f"{load.requests_per_s:>7.0f} {load.errors:>6} {drained:>6.1f}",
                        flush=True,
                    )
            finally:
                stop_server(server)
            errors = log_errors(work / f"api-{server.port}.log")
            print(f"   {server.name}: errors in its log: {errors}")
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
