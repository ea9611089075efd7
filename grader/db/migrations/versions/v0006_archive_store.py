"""The database archive store: archives in chunks, content-addressed by SHA-256.

Revision ID: 0006_archive_store
Revises: 0005_feedback_accounting
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006_archive_store"
down_revision: str | None = "0005_feedback_accounting"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "archives",
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("chunks", sa.Integer(), nullable=False),
        sa.Column("touched", sa.Float(precision=53), nullable=False),
        sa.PrimaryKeyConstraint("sha256"),
    )
    op.create_table(
        "archive_chunks",
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("sha256", "seq"),
    )


def downgrade() -> None:
    op.drop_table("archive_chunks")
    op.drop_table("archives")
