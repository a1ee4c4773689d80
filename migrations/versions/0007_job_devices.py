"""Jobs ask for devices: jobs.num_devices and jobs.engine (existing jobs: 1 device, ddp)

Revision ID: 0007
Revises: 0006
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "jobs", sa.Column("num_devices", sa.Integer(), server_default=sa.text("1"), nullable=False)
    )
    op.add_column(
        "jobs",
        sa.Column("engine", sa.String(length=32), server_default=sa.text("'ddp'"), nullable=False),
    )


def downgrade() -> None:
    op.drop_column("jobs", "engine")
    op.drop_column("jobs", "num_devices")
