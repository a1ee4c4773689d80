"""Validation: jobs.validation_dataset_id / validation_split, and the evaluations table (the
adapter's scores on the validation prompts, one row per eval step)

Revision ID: 0006
Revises: 0005
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("validation_dataset_id", sa.String(length=64), nullable=True))
    op.create_foreign_key(
        op.f("fk_jobs_validation_dataset_id_datasets"),
        "jobs",
        "datasets",
        ["validation_dataset_id"],
        ["id"],
    )
    op.add_column("jobs", sa.Column("validation_split", sa.Float(), nullable=True))
    op.create_table(
        "evaluations",
        sa.Column("job_id", sa.String(length=64), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("config_version", sa.Integer(), nullable=False),
        sa.Column("reward_mean", sa.Float(), nullable=True),
        sa.Column("reward_std", sa.Float(), nullable=True),
        sa.Column("prompts", sa.Integer(), nullable=False),
        sa.Column("samples", sa.Integer(), nullable=False),
        sa.Column("duration_s", sa.Float(), nullable=False),
        sa.Column("reward_functions", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"],
            ["jobs.id"],
            name=op.f("fk_evaluations_job_id_jobs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("job_id", "step", name=op.f("pk_evaluations")),
    )


def downgrade() -> None:
    op.drop_table("evaluations")
    op.drop_column("jobs", "validation_split")
    op.drop_constraint(op.f("fk_jobs_validation_dataset_id_datasets"), "jobs", type_="foreignkey")
    op.drop_column("jobs", "validation_dataset_id")
