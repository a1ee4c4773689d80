"""The embedded Redis (`rft-server up`, the tests' stack) wants a password even on loopback:
another process of this machine that reaches its port gets nothing without it."""

from __future__ import annotations

import socket
from pathlib import Path

import redis

from service.embedded import EmbeddedRedis


def test_the_embedded_redis_answers_only_with_its_password(tmp_path: Path) -> None:
    server = EmbeddedRedis(tmp_path / "redis")
    url = server.start()
    try:
        assert server.password in url and redis.Redis.from_url(url).ping()
        with socket.create_connection(("127.0.0.1", server.port or 0)) as connection:
            connection.sendall(b"PING\r\n")
            assert connection.recv(64).startswith(b"-NOAUTH")
        # A restart keeps the URL (the stack's processes hold it).
        server.stop()
        assert server.start() == url and redis.Redis.from_url(url).ping()
    finally:
        server.stop()
