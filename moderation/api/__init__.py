"""The versioned HTTP API for other systems (/api/v1/), built with django-ninja.

It sits above the guard and the item services: it may import moderation.review (decisions,
items, submissions) and moderation.records (selectors); nothing in moderation below it imports it.
"""
