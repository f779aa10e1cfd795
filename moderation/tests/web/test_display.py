"""How an agent's call and its context read on the item page: the call once, an agent's words as text."""

import json

from moderation.web.display import ask_body_display, ask_context_display, tool_description_display

DESCRIPTION = "Tool execution requires approval\n\nTool: refund_payment\nArgs: {'order_id': 'A-17', 'amount': 120}"
ACTIONS = [{"name": "refund_payment", "args": {"order_id": "A-17", "amount": 120}, "description": DESCRIPTION}]


def test_langchains_repeated_call_leaves_the_description_and_nothing_else_does():
    assert tool_description_display(name="refund_payment", description=DESCRIPTION) == "Tool execution requires approval"
    assert tool_description_display(name="refund_payment", description="Tool: refund_payment\nArgs: {}") == ""
    own = "Refund only broken orders.\nTool: other_tool\nArgs: kept, it is not this call"
    assert tool_description_display(name="refund_payment", description=own) == own


def test_a_body_that_only_repeats_the_call_is_left_out():
    per_call = {"type": "tool_approval", "tool_call_id": "c1", **ACTIONS[0]}
    for body, ask in (
        (f"refund_payment: {DESCRIPTION}", None),  # interrupts_forward before: batched
        (json.dumps(per_call), per_call),  # ... and per call, the ask as JSON
        ("refund_payment: Tool execution requires approval", None),  # interrupts_forward now
        ('refund_payment: {"order_id": "A-17", "amount": 120}', None),
    ):  # no description: the args
        assert ask_body_display(body=body, actions=ACTIONS, ask=ask) == "", body
    said = "refund_payment: Tool execution requires approval\nThe customer called twice."
    assert ask_body_display(body=said, actions=ACTIONS, ask=None) == said


def test_context_markdown_is_rendered_without_html_images_or_script_links():
    context = ask_context_display(
        context={
            "summary": "# Why\n<script>alert(1)</script> <b>bold</b>\n\n[x](javascript:alert(1)) ![p](http://evil.test/p.png)",
            "messages": [{"role": "tool", "name": "crm", "content": "<i>ok</i>"}],
        }
    )
    html = str(context.summary_html)
    assert "<h1>Why</h1>" in html and "&lt;script&gt;alert(1)&lt;/script&gt; &lt;b&gt;bold&lt;/b&gt;" in html
    assert "<script" not in html and "<b>" not in html and "<img" not in html and 'href="javascript' not in html
    assert context.messages[0].content == "<i>ok</i>"  # plain text: the template escapes it
    assert ask_context_display(context=None) is None and ask_context_display(context={"summary": "", "messages": []}) is None
