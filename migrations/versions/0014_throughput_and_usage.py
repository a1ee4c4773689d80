"""Cost: measured throughput per device kind and model shape, a job's estimate, GPU-seconds
and held stretches (gpu_usage), and each step's completion tokens

Revision ID: 0014
Revises: 0013
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "jobs",
        sa.Column("cost_estimate", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
    )
    op.add_column(
        "jobs", sa.Column("gpu_seconds", sa.Float(), nullable=False, server_default=sa.text("0"))
    )
    op.add_column("jobs", sa.Column("held_since", sa.DateTime(timezone=True), nullable=True))
    op.add_column("jobs", sa.Column("model_key", sa.String(length=300), nullable=True))
    op.add_column("jobs", sa.Column("device_kind", sa.String(length=200), nullable=True))
    op.add_column("jobs", sa.Column("generation_backend", sa.String(length=32), nullable=True))
    op.add_column("steps", sa.Column("completion_tokens", sa.Integer(), nullable=True))
    op.create_table(
        "throughput",
        sa.Column("device_kind", sa.String(length=200), nullable=False),
        sa.Column("model_key", sa.String(length=300), nullable=False),
        sa.Column("generation_backend", sa.String(length=32), nullable=False),
        sa.Column("steps", sa.Integer(), nullable=False),
        sa.Column("device_seconds_per_token", sa.Float(), nullable=False),
        sa.Column("tokens_per_completion", sa.Float(), nullable=False),
        sa.Column("step_seconds", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint(
            "device_kind", "model_key", "generation_backend", name=op.f("pk_throughput")
        ),
    )
    op.create_table(
        "gpu_usage",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("job_id", sa.String(length=64), nullable=False),
        sa.Column("devices", sa.Integer(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["tenant_id"],
            ["tenants.id"],
            name=op.f("fk_gpu_usage_tenant_id_tenants"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_gpu_usage")),
    )
    op.create_index(
        "ix_gpu_usage_tenant_id_started_at", "gpu_usage", ["tenant_id", "started_at"], unique=False
    )
    op.create_index("ix_gpu_usage_job_id", "gpu_usage", ["job_id"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_gpu_usage_job_id", table_name="gpu_usage")
    op.drop_index("ix_gpu_usage_tenant_id_started_at", table_name="gpu_usage")
    op.drop_table("gpu_usage")
    op.drop_table("throughput")
    op.drop_column("steps", "completion_tokens")
    for column in (
        "generation_backend",
        "device_kind",
        "model_key",
        "held_since",
        "gpu_seconds",
        "cost_estimate",
    ):
        op.drop_column("jobs", column)
