"""The instructor console's logic (DESIGN §6, §7, §12): certificate decisions and their audit
trail, certificates, the roster, submission detail, regrades and exports.

The rules (``decisions``, ``roster``, ``regrade``, ``detail``, ``exports``, ``certificates``)
are pure; ``repository`` and ``regrading`` read and write the database; the Flask side lives in
:mod:`grader.server.instructor_api`, :mod:`grader.server.instructor_pages` and
:mod:`grader.server.certificates`.
"""
