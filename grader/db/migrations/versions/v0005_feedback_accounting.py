"""Feedback accounting: what each result set showed its student and the bits it cost.

Revision ID: 0005_feedback_accounting
Revises: 0004_model_calls
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005_feedback_accounting"
down_revision: str | None = "0004_model_calls"
branch_labels: str | None = None
depends_on: str | None = None

_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "feedback_disclosures",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("grading_id", sa.Integer(), sa.ForeignKey("gradings.id"), nullable=False),
        sa.Column("submission_id", sa.String(32), sa.ForeignKey("submissions.id"), nullable=False),
        sa.Column("user_id", sa.Integer(), sa.ForeignKey("users.id"), nullable=False),
        sa.Column("case_set_version", sa.String(64), nullable=False),
        sa.Column("mode", sa.String(16), nullable=False),
        sa.Column("shown", sa.String(16), nullable=False),
        sa.Column("released", sa.Boolean(), nullable=False),
        sa.Column("withheld", sa.String(16), nullable=True),
        sa.Column("score", sa.Float(), nullable=True),
        sa.Column("view_bits", sa.Float(), nullable=False),
        sa.Column("timing_bits", sa.Float(), nullable=False),
        sa.Column("bits", sa.Float(), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("release_at", _TS, nullable=False),
        sa.UniqueConstraint("grading_id"),
    )
    op.create_index(
        "ix_feedback_disclosures_submission_id", "feedback_disclosures", ["submission_id"]
    )
    op.create_index(
        "ix_feedback_disclosures_user_version",
        "feedback_disclosures",
        ["user_id", "case_set_version"],
    )


def downgrade() -> None:
    op.drop_table("feedback_disclosures")
