"""Lineage: a job started from another job's adapter or checkpoint (init_from), and where
its own copy of those starting weights lives

Revision ID: 0010
Revises: 0009
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # No foreign key on parent_job_id: the lineage is kept after the parent's row is gone.
    op.add_column("jobs", sa.Column("parent_job_id", sa.String(length=64), nullable=True))
    op.add_column("jobs", sa.Column("parent_checkpoint_step", sa.Integer(), nullable=True))
    op.add_column("jobs", sa.Column("init_adapter_path", sa.Text(), nullable=True))
    op.add_column(
        "jobs",
        sa.Column(
            "init_from_optimizer", sa.Boolean(), nullable=False, server_default=sa.text("false")
        ),
    )


def downgrade() -> None:
    op.drop_column("jobs", "init_from_optimizer")
    op.drop_column("jobs", "init_adapter_path")
    op.drop_column("jobs", "parent_checkpoint_step")
    op.drop_column("jobs", "parent_job_id")
