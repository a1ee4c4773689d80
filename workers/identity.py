"""Who this worker process is: the id it holds job leases and placement seats under."""

from __future__ import annotations

import os
import socket
import uuid

WORKER_ID = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
