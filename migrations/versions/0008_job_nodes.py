"""Jobs over several machines: jobs.num_nodes, and job_nodes (the workers a job is placed on)

Revision ID: 0008
Revises: 0007
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "jobs", sa.Column("num_nodes", sa.Integer(), server_default=sa.text("1"), nullable=False)
    )
    op.create_table(
        "job_nodes",
        sa.Column("job_id", sa.String(length=64), nullable=False),
        sa.Column("node_rank", sa.Integer(), nullable=False),
        sa.Column("placement_id", sa.String(length=64), nullable=False),
        sa.Column("worker_id", sa.String(length=200), nullable=False),
        sa.Column("address", sa.String(length=255), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("rendezvous_port", sa.Integer(), nullable=True),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.Column("joined_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name="fk_job_nodes_job_id_jobs", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("job_id", "node_rank", name="pk_job_nodes"),
    )


def downgrade() -> None:
    op.drop_table("job_nodes")
    op.drop_column("jobs", "num_nodes")
