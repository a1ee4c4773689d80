"""Tenants and API keys. A key is shown once at creation; only its sha256 is stored."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy.orm import Session

from service.auth.repository import AuthRepository
from service.errors import NotFound, Unauthorized
from service.models import ApiKey, Tenant, new_id

KEY_PREFIX = "rft_"


def hash_api_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


@dataclass(frozen=True)
class IssuedKey:
    id: str
    tenant_id: str
    key: str  # the secret, returned once


def get_or_create_tenant(session: Session, name: str) -> Tenant:
    repository = AuthRepository(session)
    tenant = repository.get_tenant_by_name(name)
    if tenant is None:
        tenant = repository.add_tenant(Tenant(id=new_id("ten"), name=name))
    return tenant


def issue_api_key(
    session: Session, tenant: Tenant, *, name: str = "", key: str | None = None
) -> IssuedKey:
    """Create a key for the tenant. ``key`` lets a deployment pin a known development key."""
    key = key or KEY_PREFIX + secrets.token_urlsafe(32)
    api_key = AuthRepository(session).add_api_key(
        ApiKey(
            id=new_id("key"),
            tenant_id=tenant.id,
            key_hash=hash_api_key(key),
            key_prefix=key[:12],
            name=name,
        )
    )
    return IssuedKey(id=api_key.id, tenant_id=tenant.id, key=key)


def ensure_api_key(session: Session, tenant_name: str, key: str) -> str:
    """Idempotent: the tenant and the given key exist afterwards. Returns the tenant id."""
    repository = AuthRepository(session)
    existing = repository.get_active_key_by_hash(hash_api_key(key))
    if existing is not None:
        return existing.tenant_id
    tenant = get_or_create_tenant(session, tenant_name)
    issue_api_key(session, tenant, name="bootstrap", key=key)
    return tenant.id


@dataclass(frozen=True)
class Caller:
    """Who sent a request: the tenant, and the key it used (long requests re-check the key)."""

    tenant_id: str
    key_id: str


def authenticate(session: Session, key: str) -> Caller:
    """The tenant and id of an active key."""
    api_key = AuthRepository(session).get_active_key_by_hash(hash_api_key(key))
    if api_key is None:
        raise Unauthorized("invalid or revoked API key")
    return Caller(tenant_id=api_key.tenant_id, key_id=api_key.id)


def key_is_active(session: Session, key_id: str) -> bool:
    return AuthRepository(session).is_active(key_id)


def revoke_api_key(session: Session, tenant_id: str, key_id: str) -> ApiKey:
    api_key = AuthRepository(session).get_key(tenant_id, key_id)
    if api_key is None:
        raise NotFound(f"API key {key_id!r} not found")
    if api_key.revoked_at is None:
        api_key.revoked_at = datetime.now(UTC)
    return api_key
