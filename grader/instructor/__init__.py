"""The instructor console's logic (DESIGN §6, §7, §12): certificate decisions and their audit
trail, certificates, the roster, result-set detail and regrades.

The use cases are :mod:`.console` (plain functions of a session raising ``GraderError``s),
built on :mod:`.students` and :mod:`.regrades`; the rules (``decisions``, ``roster``,
``rescoring``, ``grading_detail``, ``certificates``) are pure. Every query is in
:mod:`grader.db`; the Flask side lives in :mod:`grader.server`.
"""
