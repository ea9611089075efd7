"""Users and their tokens: students and instructors.

Like every module of :mod:`grader.db`, each function takes the session as a keyword
(``*, session``) and never commits: the caller owns the transaction (see
:func:`grader.db.engine.session_scope`), so several calls can form one.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session, col, select

from grader.exceptions import UserExists

from .tables import Role, SubmissionRow, UserRow

TOKEN_PREFIX = "grd_"


def new_token() -> str:
    """A fresh bearer token: 256 random bits, URL-safe."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    """What is stored for a token: hex SHA-256 (enough for a high-entropy random token)."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def create_user(*, session: Session, name: str, role: Role) -> tuple[UserRow, str]:
    """Add a user and return it with its token (the only time the token exists in clear)."""
    if get_user_by_name(session=session, name=name) is not None:
        raise UserExists(name)
    token = new_token()
    user = UserRow(name=name, role=role.value, token_hash=hash_token(token))
    session.add(user)
    session.flush()
    return user, token


def rotate_token(*, session: Session, user: UserRow) -> str:
    """Give ``user`` a new token; the old one (and sessions signed for it) stop working."""
    token = new_token()
    user.token_hash = hash_token(token)
    session.add(user)
    session.flush()
    return token


def end_sessions(*, session: Session, user_id: int) -> None:
    """Bump the user's session generation: every page session signed before it stops working."""
    session.exec(
        sa.update(UserRow)
        .where(col(UserRow.id) == user_id)
        .values(session_generation=UserRow.session_generation + 1)
    )


def lock_user(*, session: Session, user_id: int) -> None:
    """Serialise writes for one user until the transaction ends.

    A no-op ``UPDATE`` of the user's row: a row lock on PostgreSQL, the write lock on SQLite.
    """
    session.exec(sa.update(UserRow).where(col(UserRow.id) == user_id).values(active=UserRow.active))


def find_user_by_token(*, session: Session, token: str) -> UserRow | None:
    """The active user holding ``token``, compared in constant time, or None."""
    if not token or len(token) > 200:
        return None
    digest = hash_token(token)
    user = session.exec(select(UserRow).where(UserRow.token_hash == digest)).first()
    if user is None or not user.active or not hmac.compare_digest(user.token_hash, digest):
        return None
    return user


def get_user(*, session: Session, user_id: int) -> UserRow | None:
    return session.get(UserRow, user_id)


def get_user_by_name(*, session: Session, name: str) -> UserRow | None:
    return session.exec(select(UserRow).where(UserRow.name == name)).first()


def list_users(*, session: Session) -> Sequence[UserRow]:
    return session.exec(select(UserRow).order_by(col(UserRow.name))).all()


def get_student(*, session: Session, name: str) -> UserRow | None:
    """The student called ``name`` (instructors are not students)."""
    user = get_user_by_name(session=session, name=name)
    return user if user is not None and user.role == Role.STUDENT.value else None


def list_students(*, session: Session, student_id: int | None = None) -> Sequence[UserRow]:
    """Every student (or the one with ``student_id``), by name."""
    query = select(UserRow).where(UserRow.role == Role.STUDENT.value)
    if student_id is not None:
        query = query.where(UserRow.id == student_id)
    return session.exec(query.order_by(col(UserRow.name))).all()


def user_names(*, session: Session) -> dict[int, str]:
    """Every user's name by id (for trails, exports and regrade reports)."""
    found: Any = session.connection().execute(sa.select(col(UserRow.id), col(UserRow.name)))
    return {int(row[0]): str(row[1]) for row in found}


def student_name_of(*, session: Session, submission: SubmissionRow) -> str | None:
    """The name of the user who uploaded ``submission``."""
    user = session.get(UserRow, submission.user_id)
    return user.name if user else None
