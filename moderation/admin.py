from django import forms
from django.contrib import admin, messages
from django.contrib.admin.models import LogEntry
from django.contrib.admin.utils import construct_change_message
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import PermissionDenied
from django.utils.html import format_html_join

from moderation.api.clients import apiclient_create, token_issue
from moderation.core.text import text_excerpt
from moderation.delivery.endpoints import CLIENT_ENDPOINTS_MAX, client_endpoints_full
from moderation.delivery.models import (
    SUBSCRIBABLE_EVENTS,
    ApiClient,
    ApiScope,
    ApiToken,
    DeliveryAttempt,
    WebhookDelivery,
    WebhookEndpoint,
)
from moderation.delivery.outbox import delivery_redeliver, endpoint_ping
from moderation.delivery.targets import webhook_url_check
from moderation.items.models import QueueItem
from moderation.policies.models import OnDeadline, Team, TeamMembership
from moderation.policies.rules import PolicyInvalid
from moderation.policies.teams import team_check, team_member_add, team_member_remove
from moderation.records.models import AuditLedgerEntry, DecisionAttempt, ReasonCode, ReasonRule
from moderation.records.reasons import ReasonInvalid, reason_codes_active, reason_rule_check
from moderation.review.deployments import DeploymentInvalid, GraphRoute, deployment_register, deployment_webhook_path
from moderation.review.items import (
    ItemNotEditable,
    item_body_check,
    item_content_edit,
    item_create,
)
from moderation.review.models import Deployment


class QueueItemForm(forms.ModelForm):
    def clean(self):
        cleaned = super().clean()
        if "body" in cleaned:
            item_body_check(body=cleaned["body"])
        return cleaned


@admin.register(QueueItem)
class QueueItemAdmin(admin.ModelAdmin):
    form = QueueItemForm
    list_display = ["title", "status", "decided_by", "decided_at", "source", "is_lab", "created_at"]
    list_filter = ["status", "is_lab", "source"]
    search_fields = ["title", "body", "public_id"]
    # The audit chain's head is written only by moderation.records.audit; never by hand.
    readonly_fields = [
        "public_id",
        "thread_id",
        "status",
        "decided_by",
        "decided_at",
        "decision_note",
        "review_request",
        "created_at",
        "attention",
        "attempt_count",
        "audit_head",
        "admin_edits",
        # What an API client submitted, and idempotent retries compare against: its own.
        "external_id",
        "metadata",
        "priority",
        "submitted_by",
        "idempotency_key",
    ]

    def has_change_permission(self, request, obj=None):
        # Once decided (or being decided), the content is evidence: view only.
        if obj is not None and not obj.is_pending:
            return False
        return super().has_change_permission(request, obj)

    def save_model(self, request, obj, form, change):
        if change:
            try:
                item_content_edit(item_pk=obj.pk, changes={f: form.cleaned_data[f] for f in form.changed_data})
            except ItemNotEditable as exc:
                raise PermissionDenied(str(exc)) from None
            return
        # New items must start their graph.
        created = item_create(title=obj.title, body=obj.body, source=obj.source)
        obj.pk = created.pk
        obj.public_id = created.public_id

    def construct_change_message(self, request, form, formsets, add=False):
        # Django records which fields changed; the item's history also needs what they were.
        if add or not form.changed_data:
            return super().construct_change_message(request, form, formsets, add)
        return "; ".join(
            f"changed {field} from {_excerpt(form.initial.get(field))!r} to {_excerpt(form.cleaned_data[field])!r}"
            for field in form.changed_data
        )

    @admin.display(description="admin edits")
    def admin_edits(self, obj):
        if obj.pk is None:
            return "-"
        entries = (
            LogEntry.objects.filter(content_type=ContentType.objects.get_for_model(QueueItem), object_id=str(obj.pk))
            .select_related("user")
            .order_by("action_time")
        )
        rows = [(e.action_time.isoformat(timespec="seconds"), e.user.get_username(), e.get_change_message()) for e in entries]
        return format_html_join("", "<div>{} {}: {}</div>", rows) or "none"


def _excerpt(value: object) -> str:
    return text_excerpt(text=str(value), length=200)


class _ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(DecisionAttempt)
class DecisionAttemptAdmin(_ReadOnlyAdmin):
    list_display = ["recorded_at", "item", "reviewer", "requested", "outcome", "winner", "winner_status"]
    list_filter = ["outcome", "requested"]
    search_fields = ["item__title", "reviewer__username"]


@admin.register(AuditLedgerEntry)
class AuditLedgerEntryAdmin(_ReadOnlyAdmin):
    list_display = ["seq", "kind", "item_public_id", "attempt_seq", "recorded_at", "key_id"]
    list_filter = ["kind"]


# --- Webhooks ---------------------------------------------------------------------


class WebhookEndpointForm(forms.ModelForm):
    url = forms.URLField(
        max_length=2000,
        assume_scheme="https",
        help_text="http:// or https:// URL that receives POSTed events; a public address, or one in WEBHOOK_ALLOWED_NETWORKS",
    )
    events = forms.MultipleChoiceField(
        choices=[(e.value, e.label) for e in SUBSCRIBABLE_EVENTS],
        widget=forms.CheckboxSelectMultiple,
    )

    class Meta:
        model = WebhookEndpoint
        fields = ["name", "owner", "url", "events", "active"]

    def clean_url(self):
        url = self.cleaned_data["url"]
        webhook_url_check(url)
        return url

    def clean_owner(self):
        owner = self.cleaned_data.get("owner")
        if owner is not None and owner.pk != self.instance.owner_id and client_endpoints_full(client=owner):
            raise forms.ValidationError(
                f"{owner} already has {CLIENT_ENDPOINTS_MAX} webhook endpoints, the most a client may have"
            )
        return owner


@admin.register(WebhookEndpoint)
class WebhookEndpointAdmin(admin.ModelAdmin):
    form = WebhookEndpointForm
    list_display = ["name", "owner", "url", "events", "active", "created_at"]
    list_filter = ["active", ("owner", admin.EmptyFieldListFilter)]
    actions = ["send_test_ping"]

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        # The admin wraps a POST in one transaction; the URL's check looks its host up in DNS
        # (webhook_url_validate, which gives the connection back first), so not inside one. It saves one row.
        return self._changeform_view(request, object_id, form_url, extra_context)

    def get_readonly_fields(self, request, obj=None):
        # Not on the add page: a new instance's default secret is drawn on every render and is
        # not the one saved. An operator's endpoint shows its saved secret once it exists; a
        # client's only at its creation (the client holds it, as one made over the API).
        if obj is None:
            return []
        return ["created_at"] if obj.owner_id else ["secret", "created_at"]

    def get_fieldsets(self, request, obj=None):
        if obj is not None:
            return super().get_fieldsets(request, obj)
        return [
            (
                None,
                {
                    "fields": ["name", "owner", "url", "events", "active"],
                    "description": "The signing secret is made when you save, and shown then. With an owner, "
                    "the endpoint receives only the events of the items that API client submitted; "
                    "without, every item's.",
                },
            )
        ]

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        if not change:
            self.message_user(
                request,
                f"Endpoint “{obj.name}” created. Its signing secret (give it to the receiver): {obj.secret}",
                messages.SUCCESS,
            )

    @admin.action(description="Send test ping")
    def send_test_ping(self, request, queryset):
        for endpoint in queryset:
            endpoint_ping(endpoint=endpoint)
        self.message_user(request, f"Queued a webhook.ping for {queryset.count()} endpoint(s).", messages.SUCCESS)


class DeliveryAttemptInline(admin.TabularInline):
    model = DeliveryAttempt
    fields = ["at", "status_code", "latency_ms", "error"]
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(_ReadOnlyAdmin):
    list_display = [
        "created_at",
        "event",
        "endpoint",
        "item_public_id",
        "sequence",
        "status",
        "attempts",
        "next_attempt_at",
        "last_error",
    ]
    list_filter = ["status", "event", "endpoint"]
    search_fields = ["msg_id", "item_public_id"]
    inlines = [DeliveryAttemptInline]
    actions = ["redeliver"]

    def has_redeliver_permission(self, request):
        return request.user.has_perm("moderation.change_webhookdelivery")

    @admin.action(description="Redeliver (same webhook-id)", permissions=["redeliver"])
    def redeliver(self, request, queryset):
        queued = sum(delivery_redeliver(delivery=d) for d in queryset)
        skipped = queryset.count() - queued
        self.message_user(
            request,
            f"Queued {queued} delivery(ies) again" + (f"; {skipped} still pending, left as they are." if skipped else "."),
            messages.SUCCESS,
        )


# --- Service clients (/api/v1) ---------------------------------------------------------


class ApiTokenInline(admin.TabularInline):
    model = ApiToken
    extra = 0
    fields = ["prefix", "created_at", "last_used_at", "revoked_at"]
    readonly_fields = ["prefix", "created_at", "last_used_at"]
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False  # tokens come from the "issue a token" action, which shows the token once


class ApiClientForm(forms.ModelForm):
    scopes = forms.MultipleChoiceField(choices=ApiScope.choices, widget=forms.CheckboxSelectMultiple)

    class Meta:
        model = ApiClient
        fields = ["name", "scopes", "is_active"]


@admin.register(ApiClient)
class ApiClientAdmin(admin.ModelAdmin):
    form = ApiClientForm
    list_display = ["name", "scopes", "is_active", "created_at"]
    readonly_fields = ["user", "created_at"]
    inlines = [ApiTokenInline]
    actions = ["token_issue_action"]

    def save_model(self, request, obj, form, change):
        if change:
            super().save_model(request, obj, form, change)
            return
        client, token = apiclient_create(name=obj.name, scopes=form.cleaned_data["scopes"])
        obj.pk, obj.user = client.pk, client.user
        self.message_user(request, f"Token for {client.name}, shown only now: {token}", messages.WARNING)

    @admin.action(description="Issue a new token (shown once)")
    def token_issue_action(self, request, queryset):
        for client in queryset:
            self.message_user(
                request, f"New token for {client.name}, shown only now: {token_issue(client=client)}", messages.WARNING
            )


class ReasonRuleForm(forms.ModelForm):
    codes = forms.MultipleChoiceField(
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="With \u201conly the codes listed\u201d: the codes offered.",
    )

    class Meta:
        model = ReasonRule
        fields = ["team", "graph", "offer", "codes", "required"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["codes"].choices = [(c.code, c.label) for c in reason_codes_active()]

    def clean(self):
        cleaned = super().clean()
        if "offer" in cleaned:
            try:
                cleaned["codes"] = reason_rule_check(
                    offer=cleaned["offer"], codes=cleaned.get("codes") or [], required=cleaned.get("required", False)
                )
            except ReasonInvalid as exc:
                self.add_error(exc.field or None, str(exc))
        return cleaned


@admin.register(ReasonRule)
class ReasonRuleAdmin(admin.ModelAdmin):
    """Which codes a team's rejects may name, and whether they must (``moderation.records.reasons``):
    a rule with an empty graph is the team's own; one with a graph (``ask`` for asks sent over
    the API) is for the team's items of that graph and goes before it."""

    form = ReasonRuleForm
    list_display = ["team", "graph", "offer", "codes", "required"]
    list_filter = ["team", "offer", "required"]


@admin.register(ReasonCode)
class ReasonCodeAdmin(admin.ModelAdmin):
    list_display = ["code", "label", "kind", "active", "ordering"]
    list_editable = ["label", "kind", "active", "ordering"]
    list_filter = ["active", "kind"]

    def has_delete_permission(self, request, obj=None):
        # Decisions keep the code: retire one (active off) instead, so its label still reads.
        return False


# --- Teams (moderation.policies) -------------------------------------------------------


class TeamForm(forms.ModelForm):
    class Meta:
        model = Team
        fields = [
            "slug",
            "name",
            "approvals",
            "majority",
            "veto",
            "deadline_seconds",
            "on_deadline",
            "escalate_to",
            "sources",
            "graphs",
            "allow_weaker_policies",
        ]

    def clean(self):
        cleaned = super().clean()
        if cleaned.get("on_deadline") and not cleaned.get("deadline_seconds"):
            self.add_error("deadline_seconds", "a deadline action needs a deadline: give it in seconds")
        if cleaned.get("on_deadline") == OnDeadline.ESCALATE and not cleaned.get("escalate_to"):
            self.add_error("escalate_to", "to escalate, name the team that takes overdue items")
        if self.instance.pk and cleaned.get("escalate_to") == self.instance:
            self.add_error("escalate_to", "a team cannot escalate to itself")
        return cleaned


class TeamMembershipForm(forms.ModelForm):
    remove = forms.BooleanField(required=False, help_text="end this membership (kept, stamped removed)")

    class Meta:
        model = TeamMembership
        fields = ["user"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance.pk:  # a membership's user is its identity; removal is the checkbox
            self.fields["user"].disabled = True
            if self.instance.removed_at:
                self.fields["remove"].disabled = True


class TeamMembershipFormSet(forms.BaseInlineFormSet):
    def clean(self):
        """Refuse a policy the members (after this save's additions and removals) could never satisfy."""
        super().clean()
        if any(self.errors):
            return
        adding, removing = [], []
        for form in self.forms:
            data = getattr(form, "cleaned_data", {})
            if form.instance.pk is None and data.get("user") is not None:
                adding.append(data["user"].pk)
            elif form.instance.pk and data.get("remove") and form.instance.removed_at is None:
                removing.append(form.instance.user_id)
        try:
            team_check(team=self.instance, adding=adding, removing=removing)
        except PolicyInvalid as exc:
            raise forms.ValidationError(f"Not saved: {exc}. Add moderators to the team or lower its approvals.") from None


class TeamMembershipInline(admin.TabularInline):
    """Members, past ones included: a removal is stamped (``team_member_remove``), never a deleted row."""

    model = TeamMembership
    form = TeamMembershipForm
    formset = TeamMembershipFormSet
    fields = ["user", "added_at", "removed_at", "remove"]
    readonly_fields = ["added_at", "removed_at"]
    extra = 1
    can_delete = False


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    form = TeamForm
    list_display = [
        "name",
        "slug",
        "approvals",
        "majority",
        "veto",
        "deadline_seconds",
        "on_deadline",
        "escalate_to",
        "member_names",
    ]
    inlines = [TeamMembershipInline]

    @admin.display(description="members")
    def member_names(self, obj):
        return ", ".join(m.user.get_username() for m in obj.memberships.filter(removed_at=None).select_related("user"))

    def construct_change_message(self, request, form, formsets, add=False):
        # The memberships are saved by save_formset below, not by the formset: the log names the team's fields only.
        return construct_change_message(form, [], add)

    def save_formset(self, request, form, formset, change):
        # Through the policies' own functions: an addition reuses a live membership, a
        # removal is stamped under the lock the guard takes (moderation.policies.teams).
        for inline_form in formset.forms:
            data = getattr(inline_form, "cleaned_data", {})
            if inline_form.instance.pk is None and data.get("user") is not None:
                team_member_add(team=form.instance, user=data["user"])
            elif inline_form.instance.pk and data.get("remove") and inline_form.instance.removed_at is None:
                team_member_remove(team=form.instance, user=inline_form.instance.user)


# --- LangGraph deployments (moderation.review.deployments) ------------------------------


class DeploymentAddForm(forms.ModelForm):
    """Registration: checked with the deployment (URL, key, graphs) once the form is otherwise valid, so a bad
    one is a form error and nothing is created. The API key is write-only: never rendered back."""

    url = forms.URLField(assume_scheme="https", max_length=500)
    api_key = forms.CharField(
        required=False,
        widget=forms.PasswordInput(render_value=False),
        help_text="Sent as x-api-key; leave empty for a deployment without one.",
    )
    routes = forms.CharField(
        label="Graphs",
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="One graph id or assistant id a line, optionally with the team that decides it: hitl=support",
    )
    policy = forms.JSONField(required=False, help_text='The approval policy of its items, e.g. {"approvals": 2}')

    class Meta:
        model = Deployment
        fields = ["name", "url"]

    def _post_clean(self):
        super()._post_clean()  # the model's own checks (a taken name) first
        if self.errors:
            return
        data = self.cleaned_data
        routes = []
        for line in filter(None, (line.strip() for line in data["routes"].splitlines())):
            graph, _, team = line.partition("=")
            routes.append(GraphRoute(graph=graph.strip(), team=team.strip() or None, policy=data.get("policy") or None))
        try:
            self.registered = deployment_register(name=data["name"], url=data["url"], api_key=data["api_key"], routes=routes)
        except DeploymentInvalid as exc:
            self.add_error(None, str(exc))


@admin.register(Deployment)
class DeploymentAdmin(admin.ModelAdmin):
    list_display = ["name", "url", "is_active", "swept_at", "sweep_error"]
    list_filter = ["is_active"]
    # Never the API key or the webhook secret's digest.
    fields = ["name", "url", "graphs", "is_active", "client", "created_at", "swept_at", "sweep_error"]
    readonly_fields = ["name", "url", "graphs", "client", "created_at", "swept_at", "sweep_error"]

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        # The admin wraps a POST in one transaction; an addition's form asks the deployment (which may be
        # slow) before deployment_register writes in a transaction of its own, so it is not held open meanwhile.
        if object_id is None:
            return self._changeform_view(request, object_id, form_url, extra_context)
        return super().changeform_view(request, object_id, form_url, extra_context)

    def get_form(self, request, obj=None, change=False, **kwargs):
        if obj is None:
            kwargs["form"] = DeploymentAddForm
            kwargs["fields"] = ["name", "url", "api_key", "routes", "policy"]
        return super().get_form(request, obj, change=change, **kwargs)

    def get_fields(self, request, obj=None):
        return self.fields if obj is not None else ["name", "url", "api_key", "routes", "policy"]

    def get_readonly_fields(self, request, obj=None):
        return self.readonly_fields if obj is not None else []

    def save_model(self, request, obj, form, change):
        if change:
            super().save_model(request, obj, form, change)
            return
        deployment, secret = form.registered  # made by the form's checks, after the deployment said yes
        obj.pk = deployment.pk
        path = deployment_webhook_path(deployment=deployment, secret=secret)
        self.message_user(
            request,
            f"Connected {deployment.name}. Its webhook URL for the agent's runs (webhook=...), "
            f"shown only now: {request.build_absolute_uri(path)}",
            messages.WARNING,
        )
