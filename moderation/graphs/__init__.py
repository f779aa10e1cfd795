"""Graphs an item may run: the registry of builders, their runs, and the shape of their asks.

Below the guard: ``moderation.review.decisions`` and the apply worker use these; nothing here
imports either.
"""
