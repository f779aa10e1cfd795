from django.core.exceptions import ValidationError
from django.core.management.base import CommandError
from django.db import transaction

from moderation.management.provisioning import ProvisioningCommand
from moderation.policies.models import OnDeadline, Team
from moderation.policies.rules import PolicyInvalid
from moderation.policies.teams import TeamSpec, team_policy, team_save
from moderation.records.reasons import ReasonInvalid, reason_rule_delete, reason_rule_save, reason_rules_describe


class Command(ProvisioningCommand):
    help = (
        "Create or update a team: its approval policy, the sources and graphs whose items it gets, and its members "
        "(--add / --remove, repeatable). A policy its members could never satisfy is refused, and nothing is changed."
    )

    def add_arguments(self, parser):
        parser.add_argument("slug", help="the team's short name, e.g. payments")
        parser.add_argument("--name", help="its display name (default: the slug, capitalised, for a new team)")
        parser.add_argument("--approvals", type=int, help="distinct moderators who must approve (1: the first decision settles)")
        parser.add_argument("--majority", choices=["on", "off"], help="approve with more than half the team instead")
        parser.add_argument("--veto", choices=["on", "off"], help="one rejection ends the vote")
        parser.add_argument("--deadline", type=int, metavar="SECONDS", help="how long an ask may wait (0: no deadline)")
        parser.add_argument(
            "--on-deadline",
            choices=[v or "nothing" for v in OnDeadline.values],
            help="what the deadline does: approve, reject, escalate, or nothing (wait)",
        )
        parser.add_argument("--escalate-to", metavar="SLUG", help="the team overdue items go to ('' for none)")
        parser.add_argument(
            "--source", action="append", default=None, help="an item source of this team (repeatable; replaces the list)"
        )
        parser.add_argument("--graph", action="append", default=None, help="a graph of this team (repeatable; replaces the list)")
        parser.add_argument(
            "--allow-weaker-policies",
            choices=["on", "off"],
            help="let a submitter's policy be weaker than the team's (off: only stricter; docs/integrators/policies.md)",
        )
        parser.add_argument(
            "--reason-codes",
            metavar="CODES",
            help="the reason codes a reject may name: all (every active code), none, or a comma-separated "
            "list; for --reason-graph's items, else for the team's",
        )
        parser.add_argument("--reason-required", choices=["on", "off"], help="a reject must name one of those codes")
        parser.add_argument(
            "--reason-graph",
            metavar="GRAPH",
            default="",
            help="the graph the --reason-* options are for (e.g. ask); default: the team's own rule",
        )
        parser.add_argument(
            "--reason-clear",
            action="store_true",
            help="remove the rule for --reason-graph (or the team's own): the next level applies",
        )
        parser.add_argument("--add", action="append", default=[], metavar="USER", help="a username to add")
        parser.add_argument("--remove", action="append", default=[], metavar="USER", help="a username to remove")

    def handle(self, *args, **options):
        flags = {name: options[name] == "on" if options[name] else None for name in ("majority", "veto", "allow_weaker_policies")}
        on_deadline = options["on_deadline"]
        spec = TeamSpec(
            name=options["name"],
            approvals=options["approvals"],
            **flags,
            deadline_seconds=options["deadline"],
            on_deadline=None if on_deadline is None else on_deadline.replace("nothing", ""),
            escalate_to=options["escalate_to"],
            sources=options["source"],
            graphs=options["graph"],
            add=options["add"],
            remove=options["remove"],
        )
        try:
            with transaction.atomic():
                team, created = team_save(slug=options["slug"], spec=spec)
                _reason_rule(team, options)
        except (PolicyInvalid, ValidationError, ReasonInvalid) as exc:
            raise CommandError(f"nothing changed: {_words(exc)}") from None
        members = ", ".join(sorted(team.memberships.filter(removed_at=None).values_list("user__username", flat=True)))
        self.stdout.write(
            f"{'Created' if created else 'Updated'} team {team.slug} ({team.name}): {team_describe(team)}; "
            f"members: {members or 'none'}"
        )


def _reason_rule(team: Team, options: dict) -> None:
    graph = options["reason_graph"]
    if options["reason_clear"]:
        if options["reason_codes"] or options["reason_required"]:
            raise ReasonInvalid("--reason-clear goes alone, without --reason-codes or --reason-required")
        reason_rule_delete(team=team, graph=graph)
        return
    codes = options["reason_codes"]
    required = options["reason_required"]
    if codes is None and required is None:
        if graph:
            raise ReasonInvalid("--reason-graph needs --reason-codes, --reason-required or --reason-clear")
        return
    offer = None if codes is None else codes if codes in ("all", "none") else "listed"
    listed = [c.strip() for c in codes.split(",") if c.strip()] if offer == "listed" else None
    reason_rule_save(team=team, graph=graph, offer=offer, codes=listed, required=None if required is None else required == "on")


def _words(exc: Exception) -> str:
    if isinstance(exc, ValidationError) and hasattr(exc, "message_dict"):
        return "; ".join(f"{field}: {' '.join(msgs)}" for field, msgs in exc.message_dict.items())
    return " ".join(exc.messages) if isinstance(exc, ValidationError) else str(exc)


def team_describe(team: Team) -> str:
    policy = team_policy(team=team)
    text = policy.describe()
    if policy.deadline_seconds:
        text += f"; deadline {policy.deadline_seconds} s, then {policy.on_deadline or 'wait'}"
        if team.escalate_to:
            text += f" to {team.escalate_to.slug}"
    if team.allow_weaker_policies:
        text += "; submitters may weaken it"
    if reasons := reason_rules_describe(team=team):
        text += f"; {reasons}"
    return text
