"""Comparison accounting: the bits a student's comparison discloses beyond the two views.

Revision ID: 0007_compare_disclosure
Revises: 0006_archive_store
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007_compare_disclosure"
down_revision: str | None = "0006_archive_store"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "comparison_disclosures",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("user_id", sa.Integer(), sa.ForeignKey("users.id"), nullable=False),
        sa.Column("case_set_version", sa.String(64), nullable=False),
        sa.Column("first_grading_id", sa.Integer(), sa.ForeignKey("gradings.id"), nullable=False),
        sa.Column("second_grading_id", sa.Integer(), sa.ForeignKey("gradings.id"), nullable=False),
        sa.Column("bits", sa.Float(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("first_grading_id", "second_grading_id"),
    )
    op.create_index(
        "ix_comparison_disclosures_user_version",
        "comparison_disclosures",
        ["user_id", "case_set_version"],
    )


def downgrade() -> None:
    op.drop_table("comparison_disclosures")
