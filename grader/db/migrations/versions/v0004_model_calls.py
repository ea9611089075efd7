"""Model calls on eval records: what an agent asked the model gateway while answering a case.

Revision ID: 0004_model_calls
Revises: 0003_session_generation
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004_model_calls"
down_revision: str | None = "0003_session_generation"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    # Nullable: records of runs without a gateway (and every older record) hold none.
    op.add_column("eval_records", sa.Column("model_calls", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("eval_records") as batch:
        batch.drop_column("model_calls")
