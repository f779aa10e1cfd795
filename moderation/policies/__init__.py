"""Approval policies, below the guard: who may decide an item (teams, four eyes), how
many must agree (quorum, veto, majority) and what happens when nobody decides in time
(deadlines). ``rules`` is pure; ``teams`` reads and changes memberships; the guard
(``moderation.decisions``) applies both under its locks, and ``moderation.deadlines``
(above the guard) fires the deadlines from the task worker.
"""
