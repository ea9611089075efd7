"""Initial schema: users, submissions, gradings (result sets) and eval records.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision: str | None = None
branch_labels: str | None = None
depends_on: str | None = None

_TS = sa.DateTime(timezone=True)


def _versions() -> list[sa.Column[object]]:
    """The measuring-setup columns shared by gradings and eval records (DESIGN §7)."""
    return [
        sa.Column("case_set_version", sa.String(64), nullable=False),
        sa.Column("cases_version", sa.String(64), nullable=False),
        sa.Column("policy_version", sa.String(64), nullable=False),
        sa.Column("corpus_version", sa.String(64), nullable=False),
        sa.Column("grader_version", sa.String(64), nullable=False),
        sa.Column("sandbox", sa.String(32), nullable=False),
        sa.Column("sandbox_image", sa.String(200), nullable=True),
        sa.Column("package_sha256", sa.String(64), nullable=True),
    ]


def upgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    op.create_table(
        "users",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("active", sa.Boolean(), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_users_name", "users", ["name"], unique=True)
    op.create_index("ix_users_token_hash", "users", ["token_hash"], unique=True)

    # submissions.current_grading_id and gradings.submission_id reference each other: SQLite
    # accepts the forward reference inline, PostgreSQL gets the constraint once both exist.
    current_fk = (
        [
            sa.ForeignKeyConstraint(
                ["current_grading_id"], ["gradings.id"], name="fk_submissions_current_grading"
            )
        ]
        if sqlite
        else []
    )
    op.create_table(
        "submissions",
        sa.Column("id", sa.String(32), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("filename", sa.String(255), nullable=False),
        sa.Column("agent_name", sa.String(64), nullable=False),
        sa.Column("package_sha256", sa.String(64), nullable=False),
        sa.Column("package_bytes", sa.Integer(), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("started_at", _TS, nullable=True),
        sa.Column("heartbeat_at", _TS, nullable=True),
        sa.Column("finished_at", _TS, nullable=True),
        sa.Column("job_id", sa.String(64), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("worker", sa.String(200), nullable=True),
        sa.Column("failure_kind", sa.String(32), nullable=True),
        sa.Column("failure_reason", sa.String(500), nullable=True),
        sa.Column("current_grading_id", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"]),
        sa.PrimaryKeyConstraint("id"),
        *current_fk,
    )
    op.create_index("ix_submissions_created_at", "submissions", ["created_at"])
    op.create_index("ix_submissions_package_sha256", "submissions", ["package_sha256"])
    op.create_index("ix_submissions_status", "submissions", ["status"])
    op.create_index("ix_submissions_user_id", "submissions", ["user_id"])

    op.create_table(
        "gradings",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("submission_id", sa.String(32), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("trigger", sa.String(16), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        *_versions(),
        sa.Column("decision", sa.String(16), nullable=False),
        sa.Column("reasons", sa.JSON(), nullable=False),
        sa.Column("student_view", sa.JSON(), nullable=False),
        sa.Column("retrieval", sa.JSON(), nullable=True),
        sa.Column("restarts", sa.Integer(), nullable=False),
        sa.Column("seconds", sa.Float(), nullable=False),
        sa.Column("worker", sa.String(200), nullable=True),
        sa.ForeignKeyConstraint(["submission_id"], ["submissions.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("submission_id", "version"),
    )
    op.create_index("ix_gradings_case_set_version", "gradings", ["case_set_version"])
    op.create_index("ix_gradings_submission_id", "gradings", ["submission_id"])
    if not sqlite:
        op.create_foreign_key(
            "fk_submissions_current_grading",
            "submissions",
            "gradings",
            ["current_grading_id"],
            ["id"],
        )

    op.create_table(
        "eval_records",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("grading_id", sa.Integer(), nullable=False),
        sa.Column("submission_id", sa.String(32), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("case_id", sa.String(64), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("safety", sa.Boolean(), nullable=False),
        sa.Column("passed", sa.Boolean(), nullable=False),
        *_versions(),
        sa.Column("answer", sa.JSON(), nullable=True),
        sa.Column("gates", sa.JSON(), nullable=False),
        sa.Column("error_kind", sa.String(32), nullable=True),
        sa.Column("safety_failures", sa.JSON(), nullable=False),
        sa.Column("diagnosis", sa.String(32), nullable=True),
        sa.Column("seconds", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(["grading_id"], ["gradings.id"]),
        sa.ForeignKeyConstraint(["submission_id"], ["submissions.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("grading_id", "case_id"),
    )
    op.create_index("ix_eval_records_grading_id", "eval_records", ["grading_id"])
    op.create_index("ix_eval_records_submission_id", "eval_records", ["submission_id"])


def downgrade() -> None:
    op.drop_table("eval_records")
    if op.get_bind().dialect.name != "sqlite":
        op.drop_constraint("fk_submissions_current_grading", "submissions", type_="foreignkey")
    op.drop_table("gradings")
    op.drop_table("submissions")
    op.drop_table("users")
