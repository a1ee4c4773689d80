from __future__ import annotations

from sqlalchemy import select

from service.models import Job
from service.repository import Repository


class InferenceRepository(Repository):
    def tenant_trains_on(self, tenant_id: str, base_model: str) -> bool:
        """Whether any job of the tenant names ``base_model``."""
        found = self.session.execute(
            select(Job.id).where(Job.tenant_id == tenant_id, Job.base_model == base_model).limit(1)
        ).first()
        return found is not None
