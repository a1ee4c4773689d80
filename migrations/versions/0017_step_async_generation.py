"""steps.async_generation: per step of a job with hyperparameters.async_generation, the
policy versions that sampled its rollouts, their staleness, the config versions they were
sampled under and the importance-sampling ratios; null for every other step

Revision ID: 0017
Revises: 0016
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "steps",
        sa.Column("async_generation", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
    )


def downgrade() -> None:
    op.drop_column("steps", "async_generation")
