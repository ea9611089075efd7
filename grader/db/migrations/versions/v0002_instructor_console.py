"""Instructor console: certificate decisions (audit trail), certificates, regrades.

Revision ID: 0002_instructor
Revises: 0001
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002_instructor"
down_revision: str | None = "0001"
branch_labels: str | None = None
depends_on: str | None = None

_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "certificate_decisions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("student_id", sa.Integer(), nullable=False),
        sa.Column("actor_id", sa.Integer(), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("action", sa.String(16), nullable=False),
        sa.Column("from_state", sa.String(16), nullable=False),
        sa.Column("from_source", sa.String(16), nullable=False),
        sa.Column("to_state", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("proposal", sa.String(16), nullable=True),
        sa.Column("basis_submission_id", sa.String(32), nullable=True),
        sa.Column("basis_grading_id", sa.Integer(), nullable=True),
        sa.Column("case_set_version", sa.String(64), nullable=True),
        sa.Column("certificate_id", sa.String(32), nullable=True),
        sa.ForeignKeyConstraint(["student_id"], ["users.id"]),
        sa.ForeignKeyConstraint(["actor_id"], ["users.id"]),
        sa.ForeignKeyConstraint(["basis_submission_id"], ["submissions.id"]),
        sa.ForeignKeyConstraint(["basis_grading_id"], ["gradings.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_certificate_decisions_student_id", "certificate_decisions", ["student_id"])

    op.create_table(
        "certificates",
        sa.Column("id", sa.String(32), nullable=False),
        sa.Column("student_id", sa.Integer(), nullable=False),
        sa.Column("submission_id", sa.String(32), nullable=False),
        sa.Column("grading_id", sa.Integer(), nullable=False),
        sa.Column("case_set_version", sa.String(64), nullable=False),
        sa.Column("issued_at", _TS, nullable=False),
        sa.Column("issued_by", sa.Integer(), nullable=False),
        sa.Column("revoked_at", _TS, nullable=True),
        sa.Column("revoked_by", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(["student_id"], ["users.id"]),
        sa.ForeignKeyConstraint(["submission_id"], ["submissions.id"]),
        sa.ForeignKeyConstraint(["grading_id"], ["gradings.id"]),
        sa.ForeignKeyConstraint(["issued_by"], ["users.id"]),
        sa.ForeignKeyConstraint(["revoked_by"], ["users.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_certificates_student_id", "certificates", ["student_id"])

    op.create_table(
        "regrade_runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("mode", sa.String(16), nullable=False),
        sa.Column("actor_id", sa.Integer(), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("case_set_version", sa.String(64), nullable=False),
        sa.Column("submissions", sa.Integer(), nullable=False),
        sa.Column("changed", sa.Integer(), nullable=False),
        sa.Column("seconds", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["actor_id"], ["users.id"]),
        sa.PrimaryKeyConstraint("id"),
    )

    op.create_table(
        "regrade_items",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("submission_id", sa.String(32), nullable=False),
        sa.Column("from_grading_id", sa.Integer(), nullable=True),
        sa.Column("to_grading_id", sa.Integer(), nullable=True),
        sa.Column("old_decision", sa.String(16), nullable=True),
        sa.Column("new_decision", sa.String(16), nullable=True),
        sa.Column("dropped_cases", sa.JSON(), nullable=False),
        sa.Column("missing_cases", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["regrade_runs.id"]),
        sa.ForeignKeyConstraint(["submission_id"], ["submissions.id"]),
        sa.ForeignKeyConstraint(["from_grading_id"], ["gradings.id"]),
        sa.ForeignKeyConstraint(["to_grading_id"], ["gradings.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_regrade_items_run_id", "regrade_items", ["run_id"])
    op.create_index("ix_regrade_items_submission_id", "regrade_items", ["submission_id"])
    op.create_index("ix_regrade_items_to_grading_id", "regrade_items", ["to_grading_id"])


def downgrade() -> None:
    op.drop_table("regrade_items")
    op.drop_table("regrade_runs")
    op.drop_table("certificates")
    op.drop_table("certificate_decisions")
