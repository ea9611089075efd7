"""The project's exceptions.

An agent that crashes, hangs or prints garbage is an *outcome* (a value in the case results);
these exceptions are for input the grader cannot accept and for infrastructure that is broken.
Every message is one line a user can act on and never carries hidden case content.
"""


class GraderError(Exception):
    """Base class: the message is a one-line reason safe to show to whoever asked."""


class CaseSetError(GraderError):
    """A case set (cases, policy or corpus) is invalid; the message names file, line and field."""


class PackageError(GraderError):
    """An agent package or archive is unacceptable (bad archive, missing agent.toml, …)."""


class SandboxUnavailable(GraderError):
    """The requested sandbox cannot run here (engine down, image or bwrap missing)."""


class SandboxFailure(GraderError):
    """The sandbox infrastructure broke during a run (not the agent's fault)."""
