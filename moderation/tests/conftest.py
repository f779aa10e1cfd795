import itertools

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from moderation.core.permissions import MODERATORS_GROUP
from moderation.review.items import item_create

_counter = itertools.count()


@pytest.fixture
def make_moderator(db):
    def make(username: str | None = None):
        user = get_user_model().objects.create_user(username or f"mod{next(_counter)}", password="pw-for-tests-1")
        user.groups.add(Group.objects.get(name=MODERATORS_GROUP))
        return get_user_model().objects.get(pk=user.pk)  # fresh, so permission caches are empty

    return make


@pytest.fixture
def make_viewer(db):
    def make(username: str | None = None):
        return get_user_model().objects.create_user(username or f"viewer{next(_counter)}", password="pw-for-tests-1")

    return make


@pytest.fixture
def make_item(db):
    def make(title: str = "A post", body: str = "Some harmless text.", source: str = "test"):
        return item_create(title=title, body=body, source=source)

    return make


@pytest.fixture
def alice(make_moderator):
    return make_moderator("alice")


@pytest.fixture
def bob(make_moderator):
    return make_moderator("bob")


@pytest.fixture
def reasons(db):
    """The reason codes the migration seeds: a transactional test run earlier empties the table."""
    import importlib

    from django.apps import apps

    importlib.import_module("moderation.migrations.0014_reason_codes").reasons_seed(apps, None)
    importlib.import_module("moderation.migrations.0033_reason_code_kind").tool_call_reasons_seed(apps, None)


@pytest.fixture
def carol(make_moderator):
    return make_moderator("carol")


@pytest.fixture
def payments(alice, bob, carol):
    """A team (moderation.policies) of alice, bob and carol."""
    from moderation.policies.models import Team
    from moderation.policies.teams import team_member_add

    team = Team.objects.create(slug="payments", name="Payments")
    for user in (alice, bob, carol):
        team_member_add(team=team, user=user)
    return team


@pytest.fixture
def test_graphs(settings):
    """The small asking graphs of moderation.tests.graphs_support, registered for this test."""
    from moderation.tests.graphs_support import TEST_GRAPHS

    settings.REVIEWQUEUE_GRAPHS = dict(TEST_GRAPHS)
    return TEST_GRAPHS


@pytest.fixture
def make_asking_item(db, test_graphs):
    def make(graph: str = "t_hitl", title: str = "An agent's action", graph_input: dict | None = None):
        return item_create(title=title, body="The agent wants to act.", source="agent", graph=graph, graph_input=graph_input)

    return make


@pytest.fixture(scope="session")
def langgraph_server(tmp_path_factory):
    """One real LangGraph Server (``langgraph dev``) for the session's tests; see ``moderation.tests.langgraph_server``."""
    from moderation.tests.langgraph_server import LangGraphServer
    from moderation.tests.real_server import service_missing

    server = LangGraphServer(tmp_path_factory.mktemp("langgraph"))
    try:
        server.start()
    except RuntimeError as exc:
        service_missing(str(exc))
    yield server
    server.stop()
