"""The pure grading core: case and answer models, gates, policy, decision and views.

Nothing in this package imports Flask, a database, Redis or Docker, so the server, the CLI and
the tests all grade with exactly the same code.
"""
