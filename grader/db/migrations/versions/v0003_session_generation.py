"""Session generation on users: logging out ends the page session server-side.

Revision ID: 0003_session_generation
Revises: 0002_instructor
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003_session_generation"
down_revision: str | None = "0002_instructor"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    # A server default fills existing rows (and SQLite can add a NOT NULL column only with one).
    op.add_column(
        "users",
        sa.Column("session_generation", sa.Integer(), nullable=False, server_default="0"),
    )


def downgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.drop_column("session_generation")
