"""Approval policies, below the guard: who may decide an item (teams, four eyes), how
many must agree (quorum, veto, majority) and what happens when nobody decides in time
(deadlines). ``rules`` is pure; ``teams`` reads and changes memberships; the guard
(``moderation.review.decisions``) applies both under its locks, and ``moderation.review.deadlines``
(beside the guard, calling it) fires the deadlines from the task worker.
"""
