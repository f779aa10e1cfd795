from django import forms
from django.contrib import admin

from moderation.items import item_body_check, item_create
from moderation.models import DecisionAttempt, QueueItem


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
    readonly_fields = [
        "public_id", "thread_id", "status", "decided_by", "decided_at", "decision_note", "review_request", "created_at"
    ]

    def save_model(self, request, obj, form, change):
        # New items must start their graph; edits never touch the decision fields.
        if change:
            super().save_model(request, obj, form, change)
            return
        created = item_create(title=obj.title, body=obj.body, source=obj.source)
        obj.pk = created.pk
        obj.public_id = created.public_id


@admin.register(DecisionAttempt)
class DecisionAttemptAdmin(admin.ModelAdmin):
    list_display = ["recorded_at", "item", "reviewer", "requested", "outcome", "winner", "winner_status"]
    list_filter = ["outcome", "requested"]
    search_fields = ["item__title", "reviewer__username"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
