"""The project's exceptions.

An agent that crashes, hangs or prints garbage is an *outcome* (a value in the case results);
these exceptions are for input the grader cannot accept and for infrastructure that is broken.
Every message is one line a user can act on and never carries hidden case content.

One hierarchy: every error the project raises on purpose is a :class:`GraderError`, defined
here. Only the two errors that carry a value of their layer (``LeakRefused`` with its leak
report, ``AuditRefused`` with its audit report) are defined next to that value, as subclasses of
:class:`PublishError`.
"""


class GraderError(Exception):
    """Base class: the message is a one-line reason safe to show to whoever asked."""


# --- Input and infrastructure ---------------------------------------------------------------


class CaseSetError(GraderError):
    """A case set (cases, policy or corpus) is invalid; the message names file, line and field."""


class PackageError(GraderError):
    """An agent package or archive is unacceptable (bad archive, missing agent.toml, …)."""


class SandboxUnavailable(GraderError):
    """The requested sandbox cannot run here (engine down, image or bwrap missing)."""


class SandboxFailure(GraderError):
    """The sandbox infrastructure broke during a run (not the agent's fault)."""


class AgentStartError(PackageError):
    """The agent could not start (import error, setup failure or setup timeout)."""


class ImageBuildError(SandboxFailure):
    """Building the base or the sandbox image failed; the message says what to do."""


class StorageError(GraderError):
    """An archive is missing or damaged in storage (infrastructure, not the student's fault)."""


class UploadTooLarge(GraderError):
    """The uploaded stream is larger than the limit it was received under."""


class UserExists(GraderError):
    """A user of that name already exists."""


class SettingsError(GraderError):
    """The configuration cannot work (e.g. an unsandboxed grader without the unsafe flag)."""


# --- Practice set (grader.practice) ---------------------------------------------------------


class PublishError(GraderError):
    """The practice set cannot be published (bad input, unusable output folder)."""


class PracticeUnavailable(GraderError):
    """No published practice set can be served from the configured folder."""


# --- Instructor use cases (grader.instructor): the server maps each to an HTTP status --------


class SubmissionNotFound(GraderError, LookupError):
    """No such submission, or no result set of that version."""


class StudentNotFound(GraderError, LookupError):
    """No student of that name."""


class CaseSetUnavailable(GraderError):
    """The case set cannot be loaded, so nothing can be regraded against it."""


class NothingToRerun(GraderError):
    """A rerun named no submission (and asked for no outdated ones)."""


class DecisionError(GraderError, ValueError):
    """A request that cannot be applied (the message is safe to show the instructor)."""


class InvalidTransition(DecisionError):
    """A valid action that the student's current state does not allow (a conflict, not bad input)."""


# --- Comparison (grader.core.compare) -------------------------------------------------------


class ComparisonRefused(GraderError):
    """Two result sets cannot be compared (different case-set versions, no paired case, a bad
    metric or alpha); the message is one line saying why."""
