"""The egress policy and proxy on their own: which destinations are refused, that a refusal
happens before any connection, and which hosts a deployment's settings deny or allow."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

import sandbox.egress as egress
from sandbox.egress import EgressPolicy, EgressProxy, EgressRefused, HostRule
from sandbox.settings import SandboxSettings
from service.settings import Settings, sandbox_settings

NAMES = {
    "points-at-private.example": ["10.1.2.3"],
    "points-at-loopback.example": ["127.0.0.1"],
    "points-at-metadata.example": ["169.254.169.254"],
    "mixed.example": ["198.51.100.7", "192.168.4.4"],
    "public.example": ["198.51.100.7", "2001:db8::7"],
    "judge.internal": ["10.9.9.9"],
    "redis": ["203.0.113.5"],
    "api.example": ["203.0.113.9"],
}


def resolve(host: str, port: int) -> list[str]:
    try:
        return NAMES[host]
    except KeyError:
        raise socket.gaierror(socket.EAI_NONAME, "unknown name") from None


def policy(**overrides: object) -> EgressPolicy:
    values: dict[str, object] = {
        "resolver": resolve,
        "machine_addresses": lambda: {egress.ipaddress.ip_address("203.0.113.200")},
    }
    return EgressPolicy(**(values | overrides))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("host", "reason"),
    [
        ("points-at-private.example", "points-at-private.example (10.1.2.3) is a private address"),
        ("points-at-loopback.example", "loopback"),
        ("points-at-metadata.example", "link-local"),
        ("mixed.example", "192.168.4.4"),  # one bad answer refuses the name
        ("127.0.0.1", "loopback"),
        ("127.8.9.10", "loopback"),
        ("0.0.0.0", "unspecified"),
        ("10.0.0.1", "private"),
        ("172.16.0.1", "private"),
        ("172.31.255.255", "private"),
        ("192.168.0.1", "private"),
        ("169.254.169.254", "link-local"),
        ("100.100.100.200", "carrier-grade NAT"),  # Alibaba's metadata service
        ("224.0.0.1", "multicast"),
        ("240.0.0.1", "reserved"),
        ("::1", "loopback"),
        ("::", "unspecified"),
        ("fe80::1", "link-local"),
        ("fd00:ec2::254", "unique-local"),  # AWS's IPv6 metadata service
        ("::ffff:127.0.0.1", "IPv6 form of 127.0.0.1"),
        ("::ffff:10.0.0.1", "IPv6 form of 10.0.0.1"),
        ("64:ff9b::a9fe:a9fe", "IPv6 form of 169.254.169.254"),
        ("2002:c0a8:1::", "IPv6 form of 192.168.0.1"),
        ("203.0.113.200", "an address of this deployment's own hosts"),  # this machine
        ("redis", "one of this deployment's own hosts"),
        ("203.0.113.5", "an address of this deployment's own hosts"),  # redis's address
        ("nowhere.example", "could not be resolved"),
    ],
)
def test_refused_destinations(host: str, reason: str) -> None:
    with pytest.raises(EgressRefused, match=egress.re.escape(reason)):
        policy(deployment_hosts=["redis:6379"]).check(host, 443)


def test_public_addresses_and_names_pass_checked() -> None:
    assert [str(a) for a in policy().check("public.example", 443)] == [
        "198.51.100.7",
        "2001:db8::7",
    ]
    # Documentation ranges count as public: the tests' public side lives in one.
    assert [str(a) for a in policy().check("198.51.100.2", 80)] == ["198.51.100.2"]


def test_operator_allowed_hosts_skip_the_address_checks_on_their_port_only() -> None:
    allowing = policy(allowed_hosts=["judge.internal:8080", "10.0.0.7"])
    assert [str(a) for a in allowing.check("judge.internal", 8080)] == ["10.9.9.9"]
    assert [str(a) for a in allowing.check("JUDGE.internal.", 8080)] == ["10.9.9.9"]
    assert [str(a) for a in allowing.check("10.0.0.7", 22)] == ["10.0.0.7"]
    with pytest.raises(EgressRefused, match="private"):
        allowing.check("judge.internal", 9090)


def test_a_jobs_own_hosts_narrow_the_way_out_and_stay_address_checked() -> None:
    narrowed = policy(only_hosts=["public.example:443", "points-at-private.example:443"])
    assert str(narrowed.check("public.example", 443)[0]) == "198.51.100.7"
    with pytest.raises(EgressRefused, match=r"may reach only public\.example:443"):
        narrowed.check("public.example", 80)  # another port of a listed host
    with pytest.raises(EgressRefused, match="may reach only"):
        narrowed.check("198.51.100.2", 443)  # a public host the job did not list
    with pytest.raises(EgressRefused, match="private address"):
        narrowed.check("points-at-private.example", 443)  # listed, but still checked


def test_denied_networks_add_to_the_built_in_ones() -> None:
    with pytest.raises(EgressRefused, match="a network this deployment denies"):
        policy(denied_networks=["198.51.100.0/24"]).check("public.example", 443)


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ("judge.internal", HostRule("judge.internal")),
        ("Judge.Internal:8080", HostRule("judge.internal", 8080)),
        ("[::1]:443", HostRule("::1", 443)),
        ("fd00::1", HostRule("fd00::1")),
    ],
)
def test_host_rules_parse(text: str, rule: HostRule) -> None:
    assert HostRule.parse(text) == rule


@pytest.mark.parametrize("text", ["", "host:0", "host:http", "[::1]x"])
def test_bad_host_rules_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        HostRule.parse(text)


def test_sandbox_settings_refuse_bad_entries() -> None:
    with pytest.raises(ValueError, match="egress_allowed_hosts"):
        SandboxSettings(egress_allowed_hosts=["judge:99999"])
    with pytest.raises(ValueError, match="egress_denied_networks"):
        SandboxSettings(egress_denied_networks=["not-a-network"])


def test_a_job_with_endpoints_but_no_network_may_reach_those_alone() -> None:
    """What the API's dry runs and every rank's sandboxes are given (sandbox_settings), under
    bubblewrap: the endpoints' hosts switch the network on, narrowed to them; allow_network
    keeps its wider way out; a job with neither has none."""
    settings = Settings(sandbox_isolation="bwrap")
    endpoints = ["tools.example.com:443"]
    narrowed = sandbox_settings(settings, allow_network=False, secrets={}, egress_hosts=endpoints)
    assert narrowed.allow_network and narrowed.egress_only_hosts == endpoints
    wide = sandbox_settings(settings, allow_network=True, secrets={}, egress_hosts=endpoints)
    assert wide.allow_network and wide.egress_only_hosts == []
    closed = sandbox_settings(settings, allow_network=False, secrets={})
    assert not closed.allow_network and closed.egress_only_hosts == []


def test_the_deployment_hosts_come_from_its_settings() -> None:
    settings = Settings(
        database_url="postgresql+psycopg://rft:secret@postgres:5432/rft",
        redis_url="redis://:secret@redis:6379/0",
        inference_url="http://inference:8001",
        s3_endpoint_url="http://minio:9000",
        api_host="0.0.0.0",
        vllm_server_host="vllm",
        grader_judge_base_url="http://judge.internal:9000/v1",
        sandbox_egress_allow="tools.internal, search.internal:8443",
        sandbox_egress_deny_networks="203.0.113.0/24",
    )
    configured = sandbox_settings(settings, allow_network=True, secrets={})
    hosts = {HostRule.parse(entry).host for entry in configured.egress_deployment_hosts}
    assert {"postgres", "redis", "inference", "minio", "0.0.0.0", "127.0.0.1", "vllm"} <= hosts
    assert configured.egress_allowed_hosts == [
        "tools.internal",
        "search.internal:8443",
        "judge.internal:9000",
    ]
    assert configured.egress_denied_networks == ["203.0.113.0/24"]


# -- the proxy itself, over its unix socket --------------------------------------------------


@pytest.fixture
def proxy(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[EgressProxy, list[object]]]:
    """A proxy whose connections are recorded instead of made."""
    attempts: list[object] = []

    def record(addresses: list[object], port: int) -> None:
        attempts.append((addresses, port))
        return None

    monkeypatch.setattr(egress, "connect", record)
    with EgressProxy(policy()) as running:
        yield running, attempts


def ask(path: Path, request: bytes) -> bytes:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        client.connect(str(path))
        client.sendall(request)
        received = b""
        while chunk := client.recv(4096):
            received += chunk
    return received


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"CONNECT 10.0.0.1:443 HTTP/1.1\r\nHost: 10.0.0.1:443\r\n\r\n",
        b"CONNECT points-at-metadata.example:80 HTTP/1.1\r\n\r\n",
        b"GET http://points-at-loopback.example:6379/ HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET http://[::1]:5432/ HTTP/1.1\r\n\r\n",
        # A body the proxy never forwards: read and dropped, so the client gets the answer.
        b"POST http://10.0.0.1/ HTTP/1.1\r\nContent-Length: 300000\r\n\r\n" + b"x" * 300000,
    ],
    ids=["connect-private", "connect-metadata-name", "http-loopback-name", "http-ipv6", "post"],
)
def test_a_refusal_is_a_403_before_any_connection(
    proxy: tuple[EgressProxy, list[object]], request_bytes: bytes
) -> None:
    running, attempts = proxy
    answer = ask(running.socket_path, request_bytes)
    assert answer.startswith(b"HTTP/1.1 403 refused by the egress policy: ")
    assert attempts == []
    assert running.counters.refused == 1 and running.counters.allowed == 0


def test_an_allowed_destination_is_connected_to_by_its_checked_address(
    proxy: tuple[EgressProxy, list[object]],
) -> None:
    running, attempts = proxy
    answer = ask(running.socket_path, b"CONNECT public.example:443 HTTP/1.1\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 502")  # the recorder connects nowhere
    assert [(list(map(str, addresses)), port) for addresses, port in attempts] == [  # type: ignore[call-overload]
        (["198.51.100.7", "2001:db8::7"], 443)
    ]


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET ftp://public.example/ HTTP/1.1\r\n\r\n",
        b"junk\r\n\r\n",
    ],
)
def test_what_is_not_a_proxy_request_is_a_400(
    proxy: tuple[EgressProxy, list[object]], request_bytes: bytes
) -> None:
    running, attempts = proxy
    assert ask(running.socket_path, request_bytes).startswith(b"HTTP/1.1 400")
    assert attempts == []


def test_closing_the_proxy_removes_its_socket() -> None:
    running = EgressProxy(policy())
    path = running.socket_path
    assert path.is_socket()
    running.close()
    assert not path.parent.exists()


def test_deployment_hosts_are_looked_up_once_not_per_connection() -> None:
    looked_up: list[str] = []

    def counting(host: str, port: int) -> list[str]:
        looked_up.append(host)
        return resolve(host, port)

    checking = policy(resolver=counting, deployment_hosts=["redis", "unresolvable.internal"])
    for _ in range(3):
        assert checking.check("public.example", 443)
    with pytest.raises(EgressRefused, match="own hosts"):
        checking.check("203.0.113.5", 80)  # redis's address, from the same lookup
    assert looked_up.count("redis") == 1 and looked_up.count("unresolvable.internal") == 1


def test_connections_beyond_the_limit_are_turned_away(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(egress, "MAX_CONNECTIONS", 1)
    with (
        EgressProxy(policy()) as running,
        socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as holding,
    ):
        holding.connect(str(running.socket_path))  # says nothing: holds the only slot
        answer = ask(running.socket_path, b"CONNECT public.example:443 HTTP/1.1\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 503 too many connections")


def test_a_dead_processs_proxy_folder_is_removed_by_the_next_proxy() -> None:
    finished = subprocess.Popen(["true"])  # its pid is free once it has been waited for
    finished.wait()
    stale = Path(egress.tempfile.gettempdir()) / f"{egress.DIRECTORY_PREFIX}{finished.pid}-x"
    stale.mkdir()
    alive = Path(egress.tempfile.gettempdir()) / f"{egress.DIRECTORY_PREFIX}{os.getpid()}-y"
    alive.mkdir()
    try:
        with EgressProxy(policy()):
            pass
        assert not stale.exists() and alive.exists()
    finally:
        shutil.rmtree(stale, ignore_errors=True)
        shutil.rmtree(alive, ignore_errors=True)
