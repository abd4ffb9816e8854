"""Fleet roll-up (``fleet_summaries``), back-filled from the existing summaries.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from exporter.history.fleet import rebuild_fleet_rollup

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

# The steps as of this revision: a later change of the steps needs a migration of its own
# that back-fills the new ones (a step without rows is answered from the summaries).
STEPS = (60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800, 604800)


def upgrade() -> None:
    op.create_table(
        "fleet_summaries",
        sa.Column("step", sa.Integer, nullable=False),
        sa.Column("bucket_epoch", sa.BigInteger, nullable=False),
        sa.Column("nodes", sa.Integer, nullable=False),
        sa.Column("cpus_pod_shared_nano", sa.BigInteger, nullable=False),
        sa.Column("cpus_pod_exclusive_nano", sa.BigInteger, nullable=False),
        sa.PrimaryKeyConstraint("step", "bucket_epoch", name="pk_fleet_summaries"),
    )
    rebuild_fleet_rollup(op.get_bind(), STEPS)


def downgrade() -> None:
    op.drop_table("fleet_summaries")
