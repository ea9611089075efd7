"""The public practice set: leak check against the private set, publishing, local grading.

- :mod:`.leakcheck`: pure comparison of public and private questions (no I/O).
- :mod:`.publish`: validate, leak-check and write a practice set, all or nothing.
- :mod:`.site`: what the web server needs to serve the published set at ``/practice``.
- :mod:`.commands`: ``grader practice publish`` and ``grader practice run``.
"""
