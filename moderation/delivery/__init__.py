"""Webhooks: decisions (and item events) delivered to other systems, at least once, signed, in order per item.

Below the guard, like ``moderation.records.events``: the deciding code calls
``outbox.delivery_record`` inside its transaction; nothing here imports the guard,
the API or the views.
"""
