"""Persistence: SQLModel tables, repository functions, engine set-up and Alembic migrations.

The database is the source of truth for every submission's state (DESIGN §2); Redis only carries
work. Table models live here, apart from the pure core models in :mod:`grader.core.models`.
"""

from .engine import make_engine
from .migrate import upgrade_database
from .tables import (
    EvalRecordRow,
    FailureKind,
    GradingRow,
    GradingTrigger,
    Role,
    SubmissionRow,
    SubmissionStatus,
    UserRow,
)

__all__ = [
    "EvalRecordRow",
    "FailureKind",
    "GradingRow",
    "GradingTrigger",
    "Role",
    "SubmissionRow",
    "SubmissionStatus",
    "UserRow",
    "make_engine",
    "upgrade_database",
]
