"""Reason codes get a kind (content or an agent's tool calls), and codes that fit tool calls.

Spam or Abusive do not say why an agent's refund was stopped: the rules that offer "every
active code" offer those of the item's kind (``moderation.records.reasons``). "Other" fits both.
"""

from django.db import migrations, models

TOOL_CALL_REASONS = [
    ("wrong_arguments", "Wrong arguments (amount, recipient…)"),
    ("not_permitted", "Not permitted by policy"),
    ("needs_information", "Needs more information first"),
    ("wrong_action", "Not the right action for this request"),
]


def tool_call_reasons_seed(apps, schema_editor):
    ReasonCode = apps.get_model("moderation", "ReasonCode")
    ReasonCode.objects.filter(code="other").update(kind="any")
    for n, (code, label) in enumerate(TOOL_CALL_REASONS):
        ReasonCode.objects.get_or_create(code=code, defaults={"label": label, "ordering": 100 + n * 10, "kind": "tool_call"})


def tool_call_reasons_unseed(apps, schema_editor):
    apps.get_model("moderation", "ReasonCode").objects.filter(code__in=[code for code, _ in TOOL_CALL_REASONS]).delete()


class Migration(migrations.Migration):

    dependencies = [
        ("moderation", "0032_worker_beat"),
    ]

    operations = [
        migrations.AddField(
            model_name="reasoncode",
            name="kind",
            field=models.CharField(choices=[("content", "Content (posts, comments)"), ("tool_call", "An agent's tool calls"),
                                            ("any", "Both")], default="content", max_length=16),
        ),
        migrations.RunPython(tool_call_reasons_seed, tool_call_reasons_unseed),
    ]
