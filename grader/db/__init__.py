"""Persistence: every table, every query, engine set-up and Alembic migrations.

The database is the source of truth for every submission's state (DESIGN §2); Redis only carries
work. :mod:`.tables` holds the schema; the queries are split by aggregate — :mod:`.users`,
:mod:`.submissions` (intake and the grading lifecycle), :mod:`.results` (result sets and eval
records), :mod:`.certificates` (certificates and decisions), :mod:`.regrades`, :mod:`.usage`
(daily limits), :mod:`.retention` (archives still needed) and :mod:`.metrics`. Every query
function takes the session as a keyword (``*, session``) and never commits.
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
