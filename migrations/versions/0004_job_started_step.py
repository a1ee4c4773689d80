"""jobs.started_step: the last step the worker began, so a config update can say exactly
which step it applies from

Revision ID: 0004
Revises: 0003
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "jobs", sa.Column("started_step", sa.Integer(), nullable=False, server_default="0")
    )


def downgrade() -> None:
    op.drop_column("jobs", "started_step")
