from django import forms
from django.contrib import admin, messages
from django.contrib.admin.models import LogEntry
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import PermissionDenied
from django.utils.html import format_html_join
from django.utils.text import Truncator

from moderation.apiclients import apiclient_create, token_issue
from moderation.items import ItemNotEditable, item_body_check, item_content_edit, item_create
from moderation.models import ApiClient, ApiScope, ApiToken, AuditLedgerEntry, DecisionAttempt, QueueItem


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
    # The audit chain's head is written only by moderation.audit; never by hand.
    readonly_fields = [
        "public_id", "thread_id", "status", "decided_by", "decided_at", "decision_note", "review_request", "created_at",
        "attention", "attempt_count", "audit_head", "admin_edits",
        # What an API client submitted, and idempotent retries compare against: its own.
        "external_id", "metadata", "priority", "submitted_by", "idempotency_key",
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
        entries = LogEntry.objects.filter(
            content_type=ContentType.objects.get_for_model(QueueItem), object_id=str(obj.pk)
        ).select_related("user").order_by("action_time")
        rows = [(e.action_time.isoformat(timespec="seconds"), e.user.get_username(), e.get_change_message()) for e in entries]
        return format_html_join("", "<div>{} {}: {}</div>", rows) or "none"


def _excerpt(value: object) -> str:
    return Truncator(str(value)).chars(200)


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
            self.message_user(request, f"New token for {client.name}, shown only now: {token_issue(client=client)}",
                              messages.WARNING)
