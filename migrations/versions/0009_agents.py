"""Agent jobs: versioned tool and environment sources (agent_code_versions), the tools and
environments of each config version, rollout trajectories and per-step agent metrics

Revision ID: 0009
Revises: 0008
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _json(name: str, *, default: str | None = None) -> sa.Column:
    if default is None:
        return sa.Column(name, postgresql.JSONB(astext_type=sa.Text()), nullable=True)
    return sa.Column(
        name,
        postgresql.JSONB(astext_type=sa.Text()),
        nullable=False,
        server_default=sa.text(f"'{default}'::jsonb"),
    )


def upgrade() -> None:
    op.create_table(
        "agent_code_versions",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("job_id", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("class_name", sa.String(length=100), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"],
            ["jobs.id"],
            name="fk_agent_code_versions_job_id_jobs",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name="pk_agent_code_versions"),
        sa.UniqueConstraint("job_id", "kind", "name", "version", name="uq_agent_code_versions_key"),
    )
    # Existing config versions have neither tools nor environments.
    op.add_column("job_config_versions", _json("tools", default="{}"))
    op.add_column("job_config_versions", _json("environments", default="{}"))
    op.add_column("completions", _json("trajectory"))
    op.add_column("steps", _json("agent_metrics"))
    op.add_column("evaluations", _json("agent_metrics"))


def downgrade() -> None:
    op.drop_column("evaluations", "agent_metrics")
    op.drop_column("steps", "agent_metrics")
    op.drop_column("completions", "trajectory")
    op.drop_column("job_config_versions", "environments")
    op.drop_column("job_config_versions", "tools")
    op.drop_table("agent_code_versions")
