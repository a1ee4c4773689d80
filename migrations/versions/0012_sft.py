"""Supervised fine-tuning: jobs.method ('grpo' for every existing job) and steps.metrics
(what an SFT step logs beside its loss)

Revision ID: 0012
Revises: 0009
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "jobs",
        sa.Column("method", sa.String(length=16), server_default=sa.text("'grpo'"), nullable=False),
    )
    op.add_column(
        "steps", sa.Column("metrics", postgresql.JSONB(astext_type=sa.Text()), nullable=True)
    )


def downgrade() -> None:
    op.drop_column("steps", "metrics")
    op.drop_column("jobs", "method")
