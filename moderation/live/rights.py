"""Telling open sockets that their user's rights may have changed.

A socket is admitted once, at connect, but what it was admitted with can be taken
away while it stays open: a moderator removed from the group or from a team, a permission
revoked, an account deactivated, a password reset (which changes the session hash), the
sessions deleted. Each such change made through the ORM, on any server, sends ``rights.changed``
to the user's (or the session's) sockets in every process, and each socket re-reads
its rights from the database and closes if they are gone. Changes made behind the ORM's
back (raw SQL, an expired session) are caught by the sockets' own periodic re-check.

The message carries no claim, only "check again", so a forged one costs a query.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.contrib.sessions.models import Session
from django.db.models.signals import m2m_changed, post_delete, post_save, pre_delete

from moderation.policies.models import TeamMembership
from moderation.records import events

# Saves that change nothing a socket was admitted with: logging in touches last_login.
_HARMLESS_USER_FIELDS = frozenset({"last_login"})


def rights_signals_connect() -> None:
    User = get_user_model()
    uid = "moderation.live.rights"
    m2m_changed.connect(_user_m2m_changed, sender=User.groups.through, dispatch_uid=f"{uid}.groups")
    m2m_changed.connect(_user_m2m_changed, sender=User.user_permissions.through, dispatch_uid=f"{uid}.perms")
    m2m_changed.connect(_group_permissions_changed, sender=Group.permissions.through, dispatch_uid=f"{uid}.group_perms")
    post_save.connect(_user_saved, sender=User, dispatch_uid=f"{uid}.user_saved")
    pre_delete.connect(_group_deleting, sender=Group, dispatch_uid=f"{uid}.group_deleted")
    post_delete.connect(_user_deleted, sender=User, dispatch_uid=f"{uid}.user_deleted")
    post_delete.connect(_session_deleted, sender=Session, dispatch_uid=f"{uid}.session_deleted")
    # Every way a membership changes: team_member_add / team_member_remove (manage.py team, the admin), a
    # team deleted with its memberships, a row deleted or saved by hand.
    post_save.connect(_membership_changed, sender=TeamMembership, dispatch_uid=f"{uid}.membership_saved")
    post_delete.connect(_membership_changed, sender=TeamMembership, dispatch_uid=f"{uid}.membership_deleted")


def _users_changed(user_ids: Iterable[int]) -> None:
    ids = sorted(set(user_ids))
    if ids:
        events.after_commit(lambda: events.rights_changed_broadcast(user_ids=ids))


def _group_members(group_ids: Iterable[int]) -> list[int]:
    User = get_user_model()
    return list(User.objects.filter(groups__in=list(group_ids)).values_list("pk", flat=True).distinct())


def _user_m2m_changed(sender: Any, instance: Any, action: str, reverse: bool, pk_set: set | None, **kwargs: Any) -> None:
    """user.groups / user.user_permissions changed, from either side (group.user_set, permission.user_set)."""
    if not reverse:
        if action in {"post_add", "post_remove", "post_clear"}:
            _users_changed([instance.pk])
        return
    # On clear the members must be read before they are gone.
    if action == "pre_clear":
        instance._rights_members = list(instance.user_set.values_list("pk", flat=True))
    elif action == "post_clear":
        _users_changed(getattr(instance, "_rights_members", []))
    elif action in {"post_add", "post_remove"}:
        _users_changed(pk_set or [])


def _group_permissions_changed(sender: Any, instance: Any, action: str, reverse: bool, pk_set: set | None, **kwargs: Any) -> None:
    if action not in {"post_add", "post_remove", "pre_clear", "post_clear"}:
        return
    if not reverse:  # group.permissions.*
        if action != "pre_clear":
            _users_changed(_group_members([instance.pk]))
        return
    if action == "pre_clear":  # permission.group_set.clear()
        instance._rights_groups = list(instance.group_set.values_list("pk", flat=True))
    elif action == "post_clear":
        _users_changed(_group_members(getattr(instance, "_rights_groups", [])))
    else:
        _users_changed(_group_members(pk_set or []))


def _user_saved(sender: Any, instance: Any, created: bool, update_fields: frozenset | None, **kwargs: Any) -> None:
    if created or (update_fields is not None and set(update_fields) <= _HARMLESS_USER_FIELDS):
        return
    _users_changed([instance.pk])


def _group_deleting(sender: Any, instance: Group, **kwargs: Any) -> None:
    _users_changed(_group_members([instance.pk]))


def _user_deleted(sender: Any, instance: Any, **kwargs: Any) -> None:
    _users_changed([instance.pk])


def _session_deleted(sender: Any, instance: Session, **kwargs: Any) -> None:
    session_key = instance.session_key
    events.after_commit(lambda: events.rights_changed_broadcast(session_key=session_key))


def _membership_changed(sender: Any, instance: TeamMembership, **kwargs: Any) -> None:
    _users_changed([instance.user_id])
