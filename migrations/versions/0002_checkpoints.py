"""checkpoints

Revision ID: 0002
Revises: 0001
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "checkpoints",
        sa.Column("job_id", sa.String(length=64), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_checkpoints_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("job_id", "step", name=op.f("pk_checkpoints")),
    )
    # Reaper scans: running jobs by heartbeat age.
    op.create_index("ix_jobs_status_heartbeat_at", "jobs", ["status", "heartbeat_at"])


def downgrade() -> None:
    op.drop_index("ix_jobs_status_heartbeat_at", table_name="jobs")
    op.drop_table("checkpoints")
