"""No import cycle anywhere in grader/ (import-linter's contracts in pyproject.toml do the rest)."""

from __future__ import annotations

from pathlib import Path

import grimp
import pytest


def import_cycles(package: str) -> list[tuple[str, ...]]:
    """Every group of modules that import each other, directly or through others.

    A module is in a cycle with exactly the modules it imports (transitively) that also import
    it (transitively). Imports under ``if TYPE_CHECKING:`` are left out (they never run);
    imports inside functions count: a function-level import that hides a cycle is what this
    test is for.
    """
    graph = grimp.build_graph(package, exclude_type_checking_imports=True)
    cycles = set()
    for module in graph.modules:
        both_ways = graph.find_upstream_modules(module) & graph.find_downstream_modules(module)
        if both_ways:
            cycles.add(tuple(sorted({module, *both_ways})))
    return sorted(cycles)


def test_finds_a_cycle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The cycle finder reports two modules that import each other (so a clean result means something)."""
    package = tmp_path / "cyclic"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("def f():\n    from cyclic import b\n")
    (package / "b.py").write_text("from cyclic import a\n")
    (package / "c.py").write_text("from cyclic import a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert import_cycles("cyclic") == [("cyclic.a", "cyclic.b")]


def test_no_import_cycle_in_grader() -> None:
    """No two modules of grader/ import each other, even through function-level imports."""
    assert import_cycles("grader") == []
