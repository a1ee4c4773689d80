"""steps.frac_reward_zero_std (share of a step's groups with equal rewards) and jobs.warnings
(what the run warned about: no learning signal, signs of reward hacking)

Revision ID: 0005
Revises: 0004
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("steps", sa.Column("frac_reward_zero_std", sa.Float(), nullable=True))
    op.add_column(
        "jobs",
        sa.Column(
            "warnings",
            postgresql.JSONB(astext_type=sa.Text()),
            nullable=False,
            server_default=sa.text("'[]'::jsonb"),
        ),
    )


def downgrade() -> None:
    op.drop_column("jobs", "warnings")
    op.drop_column("steps", "frac_reward_zero_std")
