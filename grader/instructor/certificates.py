"""Certificate ids and signed verification tokens (itsdangerous; no Flask, no database).

A verification URL carries the certificate id signed with the server's secret key, so a URL
cannot be forged or guessed from an id; the page it opens shows only the name, the course, the
case-set version, the date and whether the certificate is valid or revoked.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from itsdangerous import BadSignature, URLSafeSerializer

#: Separates these signatures from every other use of the secret key.
SALT = "grader.certificate.v1"
ID_PREFIX = "GC-"
DEFAULT_COURSE = "RAG Agents Capstone"


class CertificateStatus(StrEnum):
    VALID = "valid"
    REVOKED = "revoked"


def new_certificate_id() -> str:
    """A fresh public certificate id: ``GC-`` and 16 random hex digits."""
    return ID_PREFIX + secrets.token_hex(8).upper()


def _serializer(secret_key: str) -> URLSafeSerializer:
    return URLSafeSerializer(secret_key, salt=SALT)


def sign_certificate_id(certificate_id: str, *, secret_key: str) -> str:
    """The token of a verification URL."""
    return str(_serializer(secret_key).dumps(certificate_id))


def read_certificate_token(token: str, *, secret_key: str) -> str | None:
    """The certificate id a token was signed for, or None when the signature does not hold."""
    if len(token) > 200:
        return None
    try:
        value = _serializer(secret_key).loads(token)
    except BadSignature:
        return None
    return value if isinstance(value, str) else None


@dataclass(frozen=True)
class PublicCertificate:
    """A certificate as verification sees it; :meth:`as_dict` is all a page may show."""

    certificate_id: str
    name: str
    course: str
    case_set_version: str
    issued_at: datetime
    status: CertificateStatus

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "course": self.course,
            "case_set_version": self.case_set_version,
            "date": self.issued_at.date().isoformat(),
            "status": self.status.value,
        }
