"""The ``grader`` command line (DESIGN §11): ``main`` is the console script's entry point.

Modules: ``cli`` (the group, ``grade``, ``check-cases``, and every command added explicitly),
``helpers`` (exit statuses, the one-line failure, settings, the sandbox chooser), ``render``
(rich output), and one module per command group (``sandbox``, ``practice``, ``server``,
``audit``, ``regrade``).
"""

from grader.cli.cli import main

__all__ = ["main"]
