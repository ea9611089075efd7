"""The public practice set: leak check against the private set, publishing, serving.

- :mod:`.leakcheck`: pure comparison of public and private questions (no I/O).
- :mod:`.publish`: validate, leak-check and write a practice set, all or nothing.
- :mod:`.site`: what the web server needs to serve the published set at ``/practice``.
- ``grader practice publish`` and ``grader practice run`` live in :mod:`grader.cli.practice`.
"""
