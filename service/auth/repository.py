from __future__ import annotations

from sqlalchemy import select

from service.models import ApiKey, Tenant
from service.repository import Repository


class AuthRepository(Repository):
    def get_tenant_by_name(self, name: str) -> Tenant | None:
        return self.session.scalar(select(Tenant).where(Tenant.name == name))

    def add_tenant(self, tenant: Tenant) -> Tenant:
        return self.insert(tenant)

    def add_api_key(self, api_key: ApiKey) -> ApiKey:
        return self.insert(api_key)

    def get_active_key_by_hash(self, key_hash: str) -> ApiKey | None:
        return self.session.scalar(
            select(ApiKey).where(ApiKey.key_hash == key_hash, ApiKey.revoked_at.is_(None))
        )

    def is_active(self, key_id: str) -> bool:
        revoked_at = self.session.execute(
            select(ApiKey.revoked_at).where(ApiKey.id == key_id)
        ).one_or_none()
        return revoked_at is not None and revoked_at[0] is None

    def get_key(self, tenant_id: str, key_id: str) -> ApiKey | None:
        return self.session.scalar(
            select(ApiKey).where(ApiKey.id == key_id, ApiKey.tenant_id == tenant_id)
        )

    def list_keys(self, tenant_id: str) -> list[ApiKey]:
        return list(
            self.session.scalars(
                select(ApiKey).where(ApiKey.tenant_id == tenant_id).order_by(ApiKey.created_at)
            )
        )
