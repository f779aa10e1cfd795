import pytest

from moderation.graphs.asks import AskSpec
from moderation.items.models import ReviewAsk
from moderation.tests.graphs_support import ALL_TYPES, ORDER_ARGS, ORDER_SCHEMA
from moderation.web.decision_forms import (
    FormInvalid,
    ask_forms_build,
    form_decision_read,
    form_field_for,
)


def _spec(*, schema=True, actions=1):
    config = {"action_name": "refund", "allowed_decisions": ALL_TYPES, **({"args_schema": ORDER_SCHEMA} if schema else {})}
    return AskSpec(
        kind="batched",
        actions=[{"name": "refund", "args": dict(ORDER_ARGS), "description": ""} for _ in range(actions)],
        configs=[dict(config) for _ in range(actions)],
    )


def _edit_post(**fields):
    return {
        "ask": "i1",
        "action-0-type": "edit",
        "action-0-arg-order_id": "A-1001",
        "action-0-arg-amount": "80",
        "action-0-arg-currency": "EUR",
        **fields,
    }


def test_shorthand_passes_through():
    read = form_decision_read(spec=_spec(), data={"decision": "reject", "note": "spam"})
    assert (read.decision, read.decisions, read.note) == ("reject", None, "spam")


def test_decisions_json_passes_through_and_bad_json_is_marked():
    read = form_decision_read(spec=_spec(), data={"decisions": '[{"type": "approve"}]'})
    assert read.decisions == [{"type": "approve"}] and read.decision is None
    for text in ("[{", '[{"type": "edit", "edited_action": {"args": {"amount": NaN}}}]'):
        with pytest.raises(FormInvalid) as bad:
            form_decision_read(spec=_spec(), data={"decisions": text})
        assert bad.value.field == "decisions"


def test_edit_from_schema_inputs_reads_typed_values():
    read = form_decision_read(spec=_spec(), data=_edit_post(**{"action-0-arg-notify": "on"}))
    assert read.decisions == [
        {
            "type": "edit",
            "edited_action": {"name": "refund", "args": {"order_id": "A-1001", "amount": 80, "currency": "EUR", "notify": True}},
        }
    ]
    unchecked = form_decision_read(spec=_spec(), data=_edit_post(**{"action-0-arg-amount": "79.5"}))
    assert "notify" not in unchecked.decisions[0]["edited_action"]["args"]  # never set, left unset
    assert unchecked.decisions[0]["edited_action"]["args"]["amount"] == 79.5


def test_unticking_a_box_the_agent_set_sends_false():
    spec = _spec()
    spec.actions[0]["args"]["notify"] = True
    read = form_decision_read(spec=spec, data=_edit_post())
    assert read.decisions[0]["edited_action"]["args"]["notify"] is False


@pytest.mark.parametrize(
    ("field", "raw", "error"),
    [
        ("action-0-arg-amount", "eighty", "enter a number"),
        ("action-0-arg-amount", "nan", "enter a finite number"),
        ("action-0-arg-amount", "", "required"),
        ("action-0-arg-currency", "GBP", "choose one of EUR, USD"),
    ],
)
def test_unreadable_edit_input_is_marked(field, raw, error):
    with pytest.raises(FormInvalid) as bad:
        form_decision_read(spec=_spec(), data=_edit_post(**{field: raw}))
    assert (bad.value.field, str(bad.value)) == (field, error)


def _untyped_spec(**args):
    """An ask with no args_schema (LangChain's middleware as it comes): its inputs are typed by the proposed values."""
    return AskSpec(
        kind="per_call",
        actions=[{"name": "refund", "args": args, "description": ""}],
        configs=[{"action_name": "refund", "allowed_decisions": ALL_TYPES}],
    )


UNTYPED = {"order_id": "A-1001", "amount": 120, "rate": 0.5, "notify": True, "lines": [{"sku": "S-1", "qty": 2}], "memo": None}


def _untyped_post(**fields):
    return {
        "action-0-type": "edit",
        "action-0-arg-order_id": "A-1001",
        "action-0-arg-amount": "120",
        "action-0-arg-rate": "0.5",
        "action-0-arg-notify": "on",
        "action-0-arg-lines": '[{"sku": "S-1", "qty": 2}]',
        "action-0-arg-memo": "null",
        **fields,
    }


def test_without_schema_each_argument_has_an_input_typed_by_its_value():
    [form] = ask_forms_build(asks=[ReviewAsk(interrupt_id="i1", payload=_untyped_spec(**UNTYPED).as_payload())])
    inputs = {one.key: one for one in form.actions[0].edit_inputs}
    assert {key: one.widget for key, one in inputs.items()} == {
        "order_id": "text",
        "amount": "number",
        "rate": "number",
        "notify": "checkbox",
        "lines": "json",
        "memo": "json",
    }
    assert (inputs["amount"].value, inputs["amount"].step, inputs["rate"].value) == ("120", "any", "0.5")
    assert inputs["notify"].checked and inputs["memo"].value == "null"
    assert inputs["lines"].value == '[\n  {\n    "sku": "S-1",\n    "qty": 2\n  }\n]'
    assert inputs["order_id"].name == "action-0-arg-order_id" and "action-0-args" not in {one.name for one in inputs.values()}
    multiline = ask_forms_build(asks=[ReviewAsk(interrupt_id="i1", payload=_untyped_spec(text="a\nb").as_payload())])
    assert multiline[0].actions[0].edit_inputs[0].widget == "textarea"


def test_without_schema_the_inputs_read_back_as_typed_arguments():
    read = form_decision_read(
        spec=_untyped_spec(**UNTYPED),
        data=_untyped_post(
            **{"action-0-arg-amount": "80", "action-0-arg-rate": "1", "action-0-arg-lines": '[{"sku": "S-1", "qty": 1}]'}
        ),
    )
    assert read.decisions == [
        {
            "type": "edit",
            "edited_action": {
                "name": "refund",
                "args": {
                    "order_id": "A-1001",
                    "amount": 80,
                    "rate": 1,
                    "notify": True,
                    "lines": [{"sku": "S-1", "qty": 1}],
                    "memo": None,
                },
            },
        }
    ]
    unticked = form_decision_read(
        spec=_untyped_spec(**UNTYPED),
        data={
            k: v
            for k, v in _untyped_post(**{"action-0-arg-amount": "79.5", "action-0-arg-order_id": ""}).items()
            if k != "action-0-arg-notify"
        },
    )
    args = unticked.decisions[0]["edited_action"]["args"]
    assert (args["notify"], args["amount"], args["order_id"]) == (False, 79.5, "")  # an emptied text is ""


@pytest.mark.parametrize(
    ("field", "raw", "error"),
    [
        ("action-0-arg-amount", "eighty", "enter a number"),
        ("action-0-arg-amount", "", "required"),
        ("action-0-arg-lines", "[{", "not valid JSON"),
        ("action-0-arg-memo", "", "required"),
    ],
)
def test_without_schema_an_unreadable_input_is_marked_on_its_own_field(field, raw, error):
    with pytest.raises(FormInvalid, match=error) as bad:
        form_decision_read(spec=_untyped_spec(**UNTYPED), data=_untyped_post(**{field: raw}))
    assert bad.value.field == field


def test_a_script_may_still_post_the_whole_arguments_as_json():
    read = form_decision_read(
        spec=_spec(schema=False), data={"action-0-type": "edit", "action-0-args": '{"order_id": "A-1001", "amount": 80}'}
    )
    assert read.decisions[0]["edited_action"]["args"] == {"order_id": "A-1001", "amount": 80}
    for raw, error in (
        ("{oops", "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        ('{"amount": Infinity}', "Infinity is not a finite number"),
    ):
        with pytest.raises(FormInvalid, match=error) as bad:
            form_decision_read(spec=_spec(schema=False), data={"action-0-type": "edit", "action-0-args": raw})
        assert bad.value.field == "action-0-args"


def test_one_action_takes_its_message_from_the_note():
    read = form_decision_read(spec=_spec(), data={"action-0-type": "respond", "note": "call them first"})
    assert read.decisions == [{"type": "respond", "message": "call them first"}]
    assert read.note == "call them first"
    approve = form_decision_read(spec=_spec(), data={"action-0-type": "approve", "note": "fine"})
    assert approve.decisions == [{"type": "approve"}]


def test_several_actions_each_need_a_choice_and_keep_their_own_message():
    data = {"action-0-type": "reject", "action-0-message": "no", "action-1-type": "approve", "note": "mine"}
    read = form_decision_read(spec=_spec(actions=2), data=data)
    assert read.decisions == [{"type": "reject", "message": "no"}, {"type": "approve"}]
    with pytest.raises(FormInvalid) as bad:
        form_decision_read(spec=_spec(actions=2), data={"action-0-type": "approve"})
    assert bad.value.field == "action-1-type"


@pytest.mark.parametrize(
    ("guard_field", "actions", "schema", "form_field"),
    [
        ("decisions[0].edited_action.args.amount", 1, True, "action-0-arg-amount"),
        ("decisions[0].edited_action.args", 1, True, "action-0-edit"),
        ("decisions[0].edited_action.args.amount", 1, False, "action-0-arg-amount"),
        ("decisions[0].edited_action.args.other", 1, False, "action-0-edit"),
        ("decisions[0].message", 1, True, "note"),
        ("decisions[1].message", 2, True, "action-1-message"),
        ("decisions[1].type", 2, True, "action-1-type"),
        ("decisions[5].type", 2, True, ""),
        ("note", 1, True, "note"),
        ("ask", 1, True, ""),
    ],
)
def test_guard_errors_map_to_form_fields(guard_field, actions, schema, form_field):
    assert form_field_for(spec=_spec(actions=actions, schema=schema), guard_field=guard_field) == form_field
