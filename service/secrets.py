"""Job secrets (API keys for LLM-as-judge calls and the like): encrypted at rest with Fernet,
decrypted only to become the environment of that job's reward sandbox.

They are write-only over the API: responses name them, never show them. Values that reach
reward output (print, exception messages, tracebacks) are masked before anything is stored
or returned (sandbox.reward_host redacts them).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Annotated

from cryptography.fernet import Fernet, InvalidToken
from pydantic import AfterValidator

from sandbox.settings import RESERVED_ENV
from service.settings import Settings

SECRET_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
MAX_SECRETS = 32
MAX_SECRET_BYTES = 16 * 1024


class SecretsKeyError(RuntimeError):
    """The server's secrets key is missing, unreadable or not the one that sealed a job."""


def check_secrets(secrets: dict[str, str]) -> dict[str, str]:
    if len(secrets) > MAX_SECRETS:
        raise ValueError(f"at most {MAX_SECRETS} secrets per job, got {len(secrets)}")
    for name, value in secrets.items():
        if not SECRET_NAME.match(name):
            raise ValueError(
                f"secret name {name!r} is not an environment variable name "
                "(letters, digits and _, not starting with a digit)"
            )
        if name in RESERVED_ENV:
            raise ValueError(f"secret name {name!r} is reserved: the sandbox sets it")
        if len(value.encode()) > MAX_SECRET_BYTES or "\0" in value:
            raise ValueError(f"secret {name!r}: at most {MAX_SECRET_BYTES} bytes, no NUL")
    return secrets


# {NAME: value}: the environment the job's reward functions see.
JobSecrets = Annotated[dict[str, str], AfterValidator(check_secrets)]


def check_secret_changes(changes: dict[str, str | None]) -> dict[str, str | None]:
    """A config update's secrets: a value sets or replaces one, None removes it."""
    check_secrets({name: value or "" for name, value in changes.items()})
    return changes


def apply_secret_changes(current: dict[str, str], changes: dict[str, str | None]) -> dict[str, str]:
    """The secrets after ``changes``; ValueError for removing one the job does not have."""
    unknown = sorted(
        name for name, value in changes.items() if value is None and name not in current
    )
    if unknown:
        raise ValueError(f"cannot remove secrets the job does not have: {unknown}")
    updated = {
        name: value for name, value in current.items() if changes.get(name, value) is not None
    }
    updated.update({name: value for name, value in changes.items() if value is not None})
    return check_secrets(updated)


def seal(secrets: dict[str, str], settings: Settings) -> str | None:
    """The secrets as one Fernet token (None when there are none)."""
    if not secrets:
        return None
    return _cipher(settings).encrypt(json.dumps(secrets).encode()).decode()


def unseal(token: str | None, settings: Settings) -> dict[str, str]:
    if token is None:
        return {}
    try:
        return dict(json.loads(_cipher(settings).decrypt(token.encode())))
    except InvalidToken:
        raise SecretsKeyError(
            "the job's secrets cannot be decrypted with this server's key: give the API and "
            "the workers the same RFT_SECRETS_KEY (or secrets key file)"
        ) from None


def _cipher(settings: Settings) -> Fernet:
    if settings.secrets_key is not None:
        key = settings.secrets_key.get_secret_value().encode()
    else:
        key = _key_from_file(settings.secrets_key_file or settings.state_dir / "secrets.key")
    try:
        return Fernet(key)
    except ValueError as error:
        raise SecretsKeyError(f"the secrets key is not a Fernet key: {error}") from None


def _key_from_file(path: Path) -> bytes:
    """Read the key, creating it first if nobody has: written aside, then linked into place,
    so a concurrent reader never sees a half-written key and one creator wins a race."""
    try:
        return path.read_bytes().strip()
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    draft = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}")
    fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(Fernet.generate_key())
    try:
        os.link(draft, path)
    except FileExistsError:
        pass  # another process created it first: use theirs
    finally:
        draft.unlink()
    return path.read_bytes().strip()
