"""``agent.toml``: the manifest schema every package declares (DESIGN §4) and its parser."""

from __future__ import annotations

import keyword
import re
import sys
import tomllib
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from .limits import package_error

MANIFEST_NAME = "agent.toml"
# A manifest is three short keys; anything bigger is not a manifest worth parsing.
_MAX_MANIFEST_BYTES = 64 * 1024

_IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]*"
_CALLABLE_REF = re.compile(
    rf"(?P<module>{_IDENTIFIER}(?:\.{_IDENTIFIER})*):(?P<function>{_IDENTIFIER})"
)
# Docker's rule for container names, so the name is safe wherever it ends up (labels, paths).
_AGENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_MAX_AGENT_NAME = 64
_MAX_CALLABLE_REF = 200


def _check_callable_ref(value: str) -> str:
    """Return ``value`` if it is ``module:function`` with importable names, else raise."""
    if len(value) > _MAX_CALLABLE_REF:
        raise ValueError(f"is longer than {_MAX_CALLABLE_REF} characters")
    match = _CALLABLE_REF.fullmatch(value)
    if match is None:
        raise ValueError(
            f"{value!r} must look like 'module:function' (e.g. 'agent:answer'), "
            "with a dotted module path and a Python identifier"
        )
    names = [*match["module"].split("."), match["function"]]
    reserved = [name for name in names if keyword.iskeyword(name)]
    if reserved:
        raise ValueError(f"{value!r} uses the Python keyword {reserved[0]!r} as a name")
    top_level = names[0]
    # The runner has imported parts of the standard library before it loads the agent, so a
    # module of the same name would silently resolve to the stdlib one (or shadow it).
    if top_level in sys.stdlib_module_names:
        raise ValueError(
            f"module {top_level!r} has the name of a Python standard-library module; rename it"
        )
    return value


class AgentManifest(BaseModel):
    """The validated contents of ``agent.toml``."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    #: 1 to 64 characters from ``[A-Za-z0-9._-]``, starting with a letter or digit.
    name: str
    #: ``module:function`` called with each question, e.g. ``agent:answer``.
    entrypoint: str
    #: Optional ``module:function`` called once before the first question.
    setup: str | None = None

    @field_validator("name")
    @classmethod
    def _valid_name(cls, value: str) -> str:
        if not 1 <= len(value) <= _MAX_AGENT_NAME:
            raise ValueError(f"must be 1 to {_MAX_AGENT_NAME} characters long")
        if _AGENT_NAME.fullmatch(value) is None:
            raise ValueError(
                f"{value!r} may only use letters, digits, '.', '_' and '-', "
                "and must start with a letter or digit"
            )
        return value

    @field_validator("entrypoint")
    @classmethod
    def _valid_entrypoint(cls, value: str) -> str:
        return _check_callable_ref(value)

    @field_validator("setup")
    @classmethod
    def _valid_setup(cls, value: str | None) -> str | None:
        return None if value is None else _check_callable_ref(value)


def parse_manifest(agent_dir: Path) -> AgentManifest:
    """Read and validate ``agent_dir/agent.toml``, including that its modules exist.

    Raises :class:`PackageError` naming the problem: a missing or unreadable file, a TOML
    syntax error (with its line), an unknown, missing or invalid field, or an ``entrypoint`` /
    ``setup`` module with no ``.py`` file (or package ``__init__.py``) in ``agent_dir``.
    """
    path = agent_dir / MANIFEST_NAME
    if path.is_symlink():
        raise package_error(f"{MANIFEST_NAME} must be a regular file, not a symlink")
    if not path.is_file():
        raise package_error(
            f"{MANIFEST_NAME} not found at the package root{_nested_manifest_hint(agent_dir)}"
        )
    if path.stat().st_size > _MAX_MANIFEST_BYTES:
        raise package_error(f"{MANIFEST_NAME} is larger than {_MAX_MANIFEST_BYTES} bytes")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise package_error(f"{MANIFEST_NAME} is not UTF-8 text (byte {exc.start})") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise package_error(f"{MANIFEST_NAME} is not valid TOML: {exc}") from None
    try:
        manifest = AgentManifest.model_validate(data)
    except ValidationError as exc:
        raise package_error(f"{MANIFEST_NAME}: {_describe_validation_error(exc)}") from None
    for field_name, ref in (("entrypoint", manifest.entrypoint), ("setup", manifest.setup)):
        if ref is not None:
            _require_module_file(agent_dir, field_name, ref)
    return manifest


def _describe_validation_error(exc: ValidationError) -> str:
    """Every problem pydantic found, one clause each, naming the field."""
    allowed = ", ".join(AgentManifest.model_fields)
    problems: list[str] = []
    for problem in exc.errors(include_url=False):
        field_name = ".".join(str(part) for part in problem["loc"]) or "(top level)"
        if problem["type"] == "extra_forbidden":
            problems.append(f"unknown field {field_name!r} (allowed: {allowed})")
        elif problem["type"] == "missing":
            problems.append(f"missing required field {field_name!r}")
        else:
            reason = str(problem["msg"]).removeprefix("Value error, ")
            problems.append(f"invalid field {field_name!r}: {reason}")
    return "; ".join(problems)


def _require_module_file(agent_dir: Path, field_name: str, ref: str) -> None:
    """Raise unless the module of ``ref`` is a ``.py`` file or package inside ``agent_dir``."""
    module = ref.partition(":")[0]
    parts = module.split(".")
    candidates = [
        Path(*parts[:-1], parts[-1] + ".py"),
        Path(*parts, "__init__.py"),
    ]
    for candidate in candidates:
        full = agent_dir / candidate
        if full.is_file() and not full.is_symlink():
            return
    expected = " or ".join(candidate.as_posix() for candidate in candidates)
    raise package_error(
        f"{MANIFEST_NAME}: {field_name} module {module!r} not found in the package "
        f"(expected {expected})"
    )


def _nested_manifest_hint(agent_dir: Path) -> str:
    """Point at an ``agent.toml`` one or two folders down, the usual packaging slip."""
    for pattern in (f"*/{MANIFEST_NAME}", f"*/*/{MANIFEST_NAME}"):
        found = sorted(agent_dir.glob(pattern))
        if found:
            where = found[0].relative_to(agent_dir).as_posix()
            return f" (there is one at {where!r}: put agent.toml at the top of the package)"
    return ""
