"""A stand-in for "the internet" that never leaves this machine: a network namespace of the
tests' own, joined to the host by a veth pair, with HTTP, HTTPS (a self-signed certificate)
and a TCP echo server inside it.

Its addresses are a /30 of 198.51.100.0/24 (TEST-NET-2, documentation): not private, loopback
or link-local, so the egress policy treats the inside end as a public host; the host's own end
is an address of this machine and stays refused. Test traffic only ever goes to loopback or to
this namespace. Needs root and iproute2 (`ip netns`): tests skip through tests/layers.py
without them.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

HTTP_PORT = 8080
HTTPS_PORT = 8443
ECHO_PORT = 7007
GREETING = "hello from the public side"
# What POST /endpoint/word/<key> answers for {"name": <register>}: a user's own tool's table.
# Its names and words are ones the built-in tiny tool model can write (its warm-up's keys and
# values, docs/agents.md); the pairing is no table it was warmed up on.
REGISTER_WORDS = {
    "epsilon": "pear",
    "nu": "dust",
    "xi": "salt",
    "pi": "wolf",
    "tau": "star",
    "phi": "lime",
    "chi": "snow",
    "psi": "rain",
}

SERVER = r"""
import collections, http.server, json, re, socket, socketserver, ssl, sys, threading, time

address, cert, key, greeting = sys.argv[1:5]
http_port, https_port, echo_port = map(int, sys.argv[5:8])
words = json.loads(sys.argv[8])

class Greeter(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = f"{greeting} {self.path}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        # The endpoints of HTTP tools and graders (POST /endpoint/<behaviour>/<key>): echo,
        # flaky (5xx until a key's third try), slow, malformed (not JSON), status/<code>,
        # score (a grader: {"score": ...} from the body's "score" field of the reference),
        # counts (how often each key was tried), word (a tool: the word of the body's "name";
        # 401 unless the Authorization header is "Bearer <key>"),
        # answer (a grader: 1.0 when the sample's text has the reference's "answer" as a word).
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        parts = self.path.strip("/").split("/")
        behaviour, key = parts[1], "/".join(parts[1:])
        with lock:
            tries[key] += 1
            tried = tries[key]
        status, answer = 200, None
        if behaviour == "echo":
            answer = {"arguments": json.loads(body or b"null"),
                      "authorization": self.headers.get("Authorization")}
        elif behaviour == "flaky":
            status, answer = (503, {"error": "busy"}) if tried < 3 else (200, {"tries": tried})
        elif behaviour == "slow":
            time.sleep(float(parts[3]) if len(parts) > 3 else 30)
            answer = {"slept": True}
        elif behaviour == "malformed":
            answer = b"<html>not json</html>"
        elif behaviour == "status":
            status, answer = int(parts[2]), {"error": "as asked"}
        elif behaviour == "score":
            answer = {"score": json.loads(body)["item"]["score"]}
        elif behaviour == "counts":
            answer = dict(tries)
        elif behaviour == "answer":
            graded = json.loads(body)
            said = re.search(rf"\b{re.escape(graded['item']['answer'])}\b",
                             graded["sample"]["output_text"])
            answer = {"score": 1.0 if said else 0.0}
        elif behaviour == "word":
            name = (json.loads(body or b"null") or {}).get("name")
            if self.headers.get("Authorization") != f"Bearer {parts[2]}":
                status, answer = 401, {"error": "wrong or missing token"}
            else:
                answer = words.get(name, f"no register called {name!r}")
        data = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass

tries = collections.Counter()
lock = threading.Lock()

class Echo(socketserver.BaseRequestHandler):
    def handle(self):
        while data := self.request.recv(4096):
            self.request.sendall(data)

plain = http.server.ThreadingHTTPServer((address, http_port), Greeter)
secure = http.server.ThreadingHTTPServer((address, https_port), Greeter)
context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
context.load_cert_chain(cert, key)
secure.socket = context.wrap_socket(secure.socket, server_side=True)
echo = socketserver.ThreadingTCPServer((address, echo_port), Echo)
for server in (plain, secure, echo):
    threading.Thread(target=server.serve_forever, daemon=True).start()
print("ready", flush=True)
sys.stdin.read()  # until the test closes our stdin
"""


@dataclass(frozen=True)
class PublicHost:
    address: str  # inside the namespace: "public"
    host_address: str  # the host's end of the veth: an address of this machine

    @property
    def http_url(self) -> str:
        return f"http://{self.address}:{HTTP_PORT}"

    @property
    def https_url(self) -> str:
        return f"https://{self.address}:{HTTPS_PORT}"


def unavailable_reason() -> str | None:
    """Why a public namespace cannot be made here, or None."""
    if os.geteuid() != 0:
        return "creating a network namespace needs root"
    for tool in ("ip", "openssl"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    return None


# A public address no test process's /30 holds (those are 198.51.100.0-251): a host no
# job was created with, that is never this machine's either.
UNUSED_PUBLIC_ADDRESS = "198.51.100.253"


def public_addresses() -> PublicHost:
    """This test process's public side: one /30 per test process, so two sessions on one
    machine do not share addresses. Known before the host is made (a stack's settings can
    name it)."""
    base = 4 * (os.getpid() % 63)
    return PublicHost(address=f"198.51.100.{base + 2}", host_address=f"198.51.100.{base + 1}")


NAMESPACE_PREFIX = "rft-public-"


def namespace_of(pid: int) -> str:
    return f"{NAMESPACE_PREFIX}{pid}"


def veth_ends_of(pid: int) -> tuple[str, str]:
    """The host's end and the namespace's end of a test process's veth pair."""
    return f"rfp{pid % 100000}h", f"rfp{pid % 100000}n"


def delete_public_host(pid: int) -> None:
    """The namespace and the host's end of the veth (deleting either end removes both)."""
    for command in (
        ("netns", "delete", namespace_of(pid)),
        ("link", "delete", veth_ends_of(pid)[0]),
    ):
        subprocess.run(["ip", *command], capture_output=True, timeout=30, check=False)


def remove_stale_public_hosts() -> None:
    """Delete the public hosts of test processes that are gone: a run killed before its
    teardown leaves them, and a later process whose pid lands on the same /30 would find its
    address already routed to the dead one's veth."""
    listed = subprocess.run(
        ["ip", "netns", "list"], capture_output=True, text=True, timeout=30, check=False
    ).stdout
    for line in listed.splitlines():
        owner = line.split()[0].removeprefix(NAMESPACE_PREFIX) if line.split() else ""
        gone = owner.isdigit() and not Path(f"/proc/{owner}").exists()
        if line.startswith(NAMESPACE_PREFIX) and gone:
            delete_public_host(int(owner))


@contextlib.contextmanager
def public_host() -> Iterator[PublicHost]:
    namespace = namespace_of(os.getpid())
    outside, inside = veth_ends_of(os.getpid())
    host = public_addresses()
    folder = Path(tempfile.mkdtemp(prefix="rft-public-"))
    server: subprocess.Popen[str] | None = None

    def ip(*arguments: str) -> None:
        subprocess.run(["ip", *arguments], check=True, capture_output=True, timeout=30)

    remove_stale_public_hosts()
    try:
        ip("netns", "add", namespace)
        ip("link", "add", outside, "type", "veth", "peer", "name", inside)
        ip("link", "set", inside, "netns", namespace)
        ip("addr", "add", f"{host.host_address}/30", "dev", outside)
        ip("link", "set", outside, "up")
        ip("netns", "exec", namespace, "ip", "addr", "add", f"{host.address}/30", "dev", inside)
        ip("netns", "exec", namespace, "ip", "link", "set", inside, "up")
        ip("netns", "exec", namespace, "ip", "link", "set", "lo", "up")
        subprocess.run(
            [
                "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                "-subj", "/CN=public.test", "-keyout", str(folder / "key.pem"),
                "-out", str(folder / "cert.pem"),
            ],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip
        server = subprocess.Popen(
            [
                "ip", "netns", "exec", namespace, sys.executable, "-c", SERVER, host.address,
                str(folder / "cert.pem"), str(folder / "key.pem"), GREETING,
                str(HTTP_PORT), str(HTTPS_PORT), str(ECHO_PORT), json.dumps(REGISTER_WORDS),
            ],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert server.stdout is not None
        if server.stdout.readline().strip() != "ready":
            raise RuntimeError("the public side's server did not start")
        yield host
    finally:
        if server is not None:
            # The server holds the namespace open: it goes first.
            server.kill()
            server.wait()
        delete_public_host(os.getpid())
        shutil.rmtree(folder, ignore_errors=True)
