"""User code with allow_network reaches public hosts through the egress proxy, and nothing of
the deployment: not the host's loopback (Redis, Postgres, the API, the inference server), not
private, link-local or metadata addresses, with or without a DNS name in front.

The "public" side is a network namespace of the tests' own (tests/public_network.py); the
deployment's services are listeners on 127.0.0.1. No test sends a packet to a private or
metadata address: the proxy refuses before connecting, and inside the sandbox there is no
route to them at all.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

import sandbox.isolation as isolation
from sandbox.agent_api import ToolCall, ToolSpec
from sandbox.agent_host import ProcessAgentSandbox
from sandbox.api import RewardErrorKind, RewardFunctionSpec, ScoringBatch
from sandbox.isolation import detect_isolation
from sandbox.reward_host import ProcessSandbox
from sandbox.runtime_packages import install_runtime_packages
from sandbox.settings import SandboxSettings
from tests.layers import needs_layer
from tests.public_network import ECHO_PORT, GREETING, PublicHost

BWRAP = detect_isolation()
pytestmark = needs_layer(BWRAP, f"bubblewrap is not usable here: {BWRAP.reason}")

# Addresses that must never be reached; none is ever sent a packet.
FORBIDDEN_ADDRESSES = ["169.254.169.254", "10.0.0.1", "172.16.0.1", "192.168.0.1", "[::1]"]

# Tries every destination with every client and says what happened to each, as data.
PROBE = """
import json, os, socket, ssl, urllib.request, warnings

warnings.simplefilter("ignore")  # requests' InsecureRequestWarning for the self-signed host

def _try(action):
    try:
        return "ok: " + str(action())[:200]
    except Exception as error:
        return f"failed: {type(error).__name__}: {error}"[:400]

def probe_all(targets):
    import httpx, requests
    report = {"proxy": os.environ.get("HTTPS_PROXY")}
    insecure = ssl.create_default_context()
    insecure.check_hostname = False
    insecure.verify_mode = ssl.CERT_NONE
    for url in targets["urls"]:
        def with_httpx():
            response = httpx.get(url, verify=False, timeout=10)
            response.raise_for_status()
            return response.text
        def with_requests():
            response = requests.get(url, verify=False, timeout=10)
            response.raise_for_status()
            return response.text
        def with_urllib():
            return urllib.request.urlopen(url, timeout=10, context=insecure).read().decode()
        for name, action in (("httpx", with_httpx), ("requests", with_requests),
                             ("urllib", with_urllib)):
            report[f"{name} {url}"] = _try(action)
    for host, port in targets["raw"]:
        report[f"raw {host}:{port}"] = _try(
            lambda: socket.create_connection((host, port), timeout=2).close()
        )
    return report
"""
REWARD = (
    PROBE
    + """
def probe(prompt, completion, example):
    print("REPORT " + json.dumps(probe_all(example["targets"])))
    return 1.0
"""
)
TOOL = (
    PROBE
    + """
def probe(targets: dict) -> dict:
    return probe_all(targets)
"""
)
# Through a plain CONNECT tunnel: any TCP stream, not only HTTP, reaches a public host.
TUNNEL = """
import os, socket
from urllib.parse import urlsplit

def tunnel(prompt, completion, example):
    proxy = urlsplit(os.environ["HTTPS_PROXY"])
    with socket.create_connection((proxy.hostname, proxy.port), timeout=10) as connection:
        target = example["target"]
        connection.sendall(f"CONNECT {target} HTTP/1.1\\r\\nHost: {target}\\r\\n\\r\\n".encode())
        head = b""
        while b"\\r\\n\\r\\n" not in head:
            head += connection.recv(1)
        if not head.startswith(b"HTTP/1.1 200"):
            raise ConnectionError(head.decode().splitlines()[0])
        connection.sendall(b"echo me")
        echoed = b""
        while len(echoed) < 7:
            echoed += connection.recv(16)
    return float(echoed == b"echo me")
"""
JUDGE = """
import httpx

def judged(prompt, completion, example):
    response = httpx.get(example["url"], timeout=10)
    response.raise_for_status()
    return float("public side" in response.text)
"""


@pytest.fixture(scope="module")
def http_clients(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """httpx and requests as a job's runtime packages, installed the way the worker does."""
    target = tmp_path_factory.mktemp("job") / "packages"
    return install_runtime_packages(["httpx", "requests"], target)


@pytest.fixture(scope="module")
def deployment() -> Iterator[list[socket.socket]]:
    """Listeners on the host's loopback standing in for Redis, the API and the inference
    server; a connection to any of them is a failure."""
    listeners = []
    for _ in range(3):
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.setblocking(False)
        listeners.append(listener)
    yield listeners
    for listener in listeners:
        listener.close()


def networked(packages: Path, deployment: list[socket.socket], **extra: object) -> SandboxSettings:
    values: dict[str, object] = {
        "isolation": "bwrap",
        "allow_network": True,
        "extra_python_paths": [packages],
        "call_timeout_s": 60.0,
        "sample_timeout_s": 60.0,
        "memory_limit_mb": 1024,
        "log_limit_bytes": 1 << 20,
        "egress_deployment_hosts": [
            f"127.0.0.1:{listener.getsockname()[1]}" for listener in deployment
        ],
    }
    return SandboxSettings(**(values | extra))  # type: ignore[arg-type]


def targets(public_side: PublicHost, deployment: list[socket.socket]) -> dict[str, object]:
    ports = [listener.getsockname()[1] for listener in deployment]
    internal = [f"http://127.0.0.1:{port}/" for port in ports]
    internal += [f"http://localhost:{ports[0]}/", f"https://127.0.0.1:{ports[1]}/"]
    internal += [f"http://{address}/latest/meta-data/" for address in FORBIDDEN_ADDRESSES]
    internal += [f"https://{address}/" for address in FORBIDDEN_ADDRESSES]
    # The host's own end of the veth is an address of this machine: refused too.
    internal.append(f"http://{public_side.host_address}:{ports[0]}/")
    public_urls = [f"{public_side.http_url}/hello", f"{public_side.https_url}/secure"]
    return {
        "urls": internal + public_urls,
        "raw": [("127.0.0.1", port) for port in ports] + [(public_side.address, ECHO_PORT)],
        "internal": internal,
        "public": public_urls,
    }


def assert_only_public_reached(
    report: dict[str, str], wanted: dict[str, object], deployment: list[socket.socket]
) -> None:
    assert str(report["proxy"]).startswith("http://127.0.0.1:")
    for url in wanted["internal"]:  # type: ignore[attr-defined]
        for client in ("httpx", "requests", "urllib"):
            outcome = report[f"{client} {url}"]
            assert outcome.startswith("failed") and "refused by the egress policy" in outcome, (
                client,
                url,
                outcome,
            )
    for url in wanted["public"]:  # type: ignore[attr-defined]
        for client in ("httpx", "requests", "urllib"):
            assert report[f"{client} {url}"].startswith(f"ok: {GREETING}"), (client, url, report)
    # Raw sockets reach nothing at all: the sandbox's loopback is its own, and it has no route.
    for key, outcome in report.items():
        if key.startswith("raw "):
            assert outcome.startswith("failed"), (key, outcome)
    for listener in deployment:
        with pytest.raises(BlockingIOError):
            listener.accept()


def test_reward_code_reaches_public_hosts_and_none_of_the_deployment(
    public_side: PublicHost, http_clients: Path, deployment: list[socket.socket]
) -> None:
    wanted = targets(public_side, deployment)
    with ProcessSandbox(networked(http_clients, deployment)) as sandbox:
        sandbox.load([RewardFunctionSpec(name="probe", source=REWARD)])
        batch = ScoringBatch(prompts=["p"], completions=["c"], examples=[{"targets": wanted}])
        result = sandbox.score(batch)["probe"]
    assert result.scores == [1.0] and not result.errors, result.errors
    line = next(line for line in result.logs.splitlines() if line.startswith("REPORT "))
    assert_only_public_reached(json.loads(line.removeprefix("REPORT ")), wanted, deployment)


def test_agent_tools_reach_public_hosts_and_none_of_the_deployment(
    public_side: PublicHost, http_clients: Path, deployment: list[socket.socket]
) -> None:
    wanted = targets(public_side, deployment)
    with ProcessAgentSandbox(networked(http_clients, deployment)) as sandbox:
        sandbox.load([ToolSpec(name="probe", source=TOOL)], [])
        outcome = sandbox.call([ToolCall("probe", {"targets": wanted})])[0]
    assert outcome.error is None, outcome.error
    assert isinstance(outcome.result, dict)
    assert_only_public_reached(outcome.result, wanted, deployment)


def test_a_refused_call_is_a_typed_error_and_scoring_goes_on(
    public_side: PublicHost, http_clients: Path, deployment: list[socket.socket]
) -> None:
    urls = [f"{public_side.http_url}/judge", "http://10.0.0.1/judge", "http://169.254.169.254/"]
    with ProcessSandbox(networked(http_clients, deployment)) as sandbox:
        sandbox.load([RewardFunctionSpec(name="judged", source=JUDGE)])
        batch = ScoringBatch(
            prompts=["p"] * 3, completions=["c"] * 3, examples=[{"url": url} for url in urls]
        )
        result = sandbox.score(batch)["judged"]
        # The same sandbox keeps scoring afterwards.
        again = sandbox.score(
            ScoringBatch(prompts=["p"], completions=["c"], examples=[{"url": urls[0]}])
        )["judged"]
    assert result.scores == [1.0, None, None]
    assert [error.sample_index for error in result.errors] == [1, 2]
    for error in result.errors:
        assert error.kind is RewardErrorKind.EXCEPTION
        assert "refused by the egress policy" in error.message
    assert again.scores == [1.0]


def test_a_connect_tunnel_carries_any_tcp_stream_to_a_public_host(
    public_side: PublicHost, http_clients: Path, deployment: list[socket.socket]
) -> None:
    port = deployment[0].getsockname()[1]
    examples = [{"target": f"{public_side.address}:{ECHO_PORT}"}, {"target": f"127.0.0.1:{port}"}]
    with ProcessSandbox(networked(http_clients, deployment)) as sandbox:
        sandbox.load([RewardFunctionSpec(name="tunnel", source=TUNNEL)])
        batch = ScoringBatch(prompts=["p"] * 2, completions=["c"] * 2, examples=examples)
        result = sandbox.score(batch)["tunnel"]
    assert result.scores == [1.0, None]
    assert "403 refused by the egress policy" in result.errors[0].message
    with pytest.raises(BlockingIOError):
        deployment[0].accept()


def test_an_operator_allowed_internal_host_is_reachable(
    public_side: PublicHost, http_clients: Path, deployment: list[socket.socket]
) -> None:
    """The public side stands in for an internal judge: denied as an internal network until
    the operator names it."""
    denied = networked(
        http_clients, deployment, egress_denied_networks=[f"{public_side.address}/32"]
    )
    allowed = networked(
        http_clients,
        deployment,
        egress_denied_networks=[f"{public_side.address}/32"],
        egress_allowed_hosts=[f"{public_side.address}:{public_side.http_url.rsplit(':', 1)[1]}"],
    )
    example = [{"url": f"{public_side.http_url}/judge"}]
    outcomes = []
    for settings in (denied, allowed):
        with ProcessSandbox(settings) as sandbox:
            sandbox.load([RewardFunctionSpec(name="judged", source=JUDGE)])
            batch = ScoringBatch(prompts=["p"], completions=["c"], examples=example)
            outcomes.append(sandbox.score(batch)["judged"])
    assert outcomes[0].scores == [None]
    assert "a network this deployment denies" in outcomes[0].errors[0].message
    assert outcomes[1].scores == [1.0], outcomes[1].errors


def test_without_allow_network_nothing_is_reachable_not_even_public_hosts(
    public_side: PublicHost,
) -> None:
    source = textwrap.dedent(
        """
        import os, socket
        def isolated(prompt, completion, example):
            assert "HTTPS_PROXY" not in os.environ and not os.path.exists("/opt/rft/egress.sock")
            try:
                socket.create_connection((example["host"], example["port"]), timeout=2)
            except OSError:
                return 0.0
            return 1.0
        """
    )
    with ProcessSandbox(SandboxSettings(isolation="bwrap", call_timeout_s=10)) as sandbox:
        sandbox.load([RewardFunctionSpec(name="isolated", source=source)])
        batch = ScoringBatch(
            prompts=["p"],
            completions=["c"],
            examples=[{"host": public_side.address, "port": ECHO_PORT}],
        )
        result = sandbox.score(batch)["isolated"]
    assert result.scores == [0.0], result.errors


@needs_layer(os.geteuid() == 0, "as root only: the socket then belongs to the sandbox's uid")
def test_the_proxy_socket_belongs_to_its_sandbox_alone(deployment: list[socket.socket]) -> None:
    settings = SandboxSettings(isolation="bwrap", allow_network=True, call_timeout_s=10)
    with ProcessSandbox(settings) as sandbox:
        worker = sandbox._workers[0]
        assert worker.egress is not None and worker.uid_lease is not None
        path = worker.egress.socket_path
        info, folder = path.stat(), path.parent.stat()
        assert stat.S_ISSOCK(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o600
        assert info.st_uid == worker.uid_lease.uid
        assert folder.st_uid == 0 and stat.S_IMODE(folder.st_mode) == 0o700
    assert not path.exists()  # gone with the sandbox


@pytest.mark.parametrize("euid", [0, 1000], ids=["root", "unprivileged"])
@pytest.mark.parametrize("allow_network", [False, True])
def test_every_launch_unshares_the_network(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, euid: int, allow_network: bool
) -> None:
    """As root (--unshare-net) and unprivileged (--unshare-all, never --share-net), with or
    without allow_network: only the egress socket is added."""
    monkeypatch.setattr(isolation.os, "geteuid", lambda: euid)
    socket_path = tmp_path / "egress.sock"
    settings = SandboxSettings(isolation="bwrap", allow_network=allow_network, sandbox_uid=61000)
    plan = isolation.plan_launch(settings, egress_socket=socket_path if allow_network else None)
    options = plan.argv[: plan.argv.index("--")]
    assert "--share-net" not in options
    assert ("--unshare-net" if euid == 0 else "--unshare-all") in options
    bound = f"{socket_path} {isolation.INSIDE_EGRESS_SOCKET}" in " ".join(options)
    assert bound is allow_network
    limits = json.loads(plan.argv[-1])
    assert ("egress_socket" in limits) is allow_network
    if allow_network:
        with pytest.raises(ValueError, match="egress proxy"):
            isolation.plan_launch(settings)
