"""Property-based: no JSON body makes the decision endpoint fail or change what it refused."""

import json

import pytest
from django.urls import reverse
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from moderation.items.models import QueueItem
from moderation.records.models import DecisionAttempt

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=12,
)
bodies = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {"decision": st.one_of(st.sampled_from(["approve", "reject", "", "APPROVE", "maybe"]), json_values)},
        optional={"note": st.one_of(st.text(max_size=50), json_values), "extra": json_values},
    ),
)


def _state(item):
    row = QueueItem.objects.get(pk=item.pk)
    return (row.status, row.decided_by_id, row.decision_note, DecisionAttempt.objects.filter(item=item).count())


@pytest.fixture
def endpoint(client, alice, make_item, settings):
    """A logged-in moderator, a pending item and its decision URL, with no rate limit."""
    settings.DECISION_RATE_LIMIT = 0
    item = make_item()
    client.force_login(alice)
    return client, item, reverse("moderation:api-decide", args=[item.public_id])


@pytest.mark.django_db
def test_any_json_body_gets_a_clear_answer_and_refusals_change_nothing(endpoint):
    client, item, url = endpoint

    @hsettings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(body=bodies)
    def check(body):
        before = _state(item)
        response = client.post(url, data=json.dumps(body), content_type="application/json")
        assert response.status_code in {200, 400, 409}, response.content
        payload = response.json()
        assert payload.get("message")
        if response.status_code == 400:
            assert _state(item) == before
            assert payload["error"] in {"invalid_decision", "malformed_json"}

    check()


@pytest.mark.django_db
def test_arbitrary_bytes_never_break_the_endpoint(endpoint):
    client, item, url = endpoint

    @hsettings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(raw=st.binary(max_size=200))
    def check(raw):
        before = _state(item)
        response = client.post(url, data=raw, content_type="application/json")
        # An empty body reaches Django without a content type: 415, also a clear refusal.
        assert response.status_code in {200, 400, 409, 415}
        assert response.json()["message"]
        if response.status_code != 200:
            assert _state(item)[:3] == before[:3]

    check()
