"""What every ``grader`` command shares: exit statuses and the one-line failure.

An expected failure (bad input, an unusable sandbox) ends with one line on stderr, prefixed
``grader:``, and a non-zero status; tracebacks are for bugs only.
"""

from __future__ import annotations

import sys
from typing import NoReturn

import click

EXIT_BAD_INPUT = 2
EXIT_SANDBOX = 3
#: ``check-cases`` and ``practice publish``: the case set is valid but its evaluator audit
#: (DESIGN §9) fails — a canary agent that deserves zero scores on it.
EXIT_AUDIT_FAILED = 5


def fail(message: str, status: int = EXIT_BAD_INPUT) -> NoReturn:
    """Print ``message`` as one line on stderr and exit with ``status``."""
    click.echo(f"grader: {' '.join(message.split())}", err=True)
    sys.exit(status)


def note(message: str) -> None:
    """A line for the person at the terminal (stderr, so --json output stays clean)."""
    click.echo(message, err=True)
