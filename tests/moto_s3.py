"""An S3 endpoint for tests: moto's server in a child process (S3 is our true outside edge)."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from collections.abc import Iterator

import httpx

from service.embedded import free_port

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}


@contextlib.contextmanager
def moto_s3_server() -> Iterator[str]:
    executable = shutil.which("moto_server")
    assert executable, "moto_server is missing: pip install 'moto[server,s3]'"
    port = free_port()
    process = subprocess.Popen(
        [executable, "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(httpx.HTTPError):
                httpx.get(url, timeout=0.5)
                break
            assert time.monotonic() < deadline, "moto_server did not start"
            time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)
