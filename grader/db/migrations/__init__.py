"""Alembic environment and revisions (run through :func:`grader.db.migrate.upgrade_database`)."""
