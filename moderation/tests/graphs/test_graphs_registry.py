"""moderation.graphs.registry: which graphs an item may run, checked at start-up."""

import pytest
from django.core.exceptions import ImproperlyConfigured, ValidationError

from moderation.graphs.registry import UnknownGraph, graph_name_validate, graphs_check
from moderation.models import QueueItem
from moderation.review.items import item_create
from moderation.tests.graphs_support import TEST_GRAPHS


def test_registered_graphs_pass_the_check(settings):
    settings.REVIEWQUEUE_GRAPHS = dict(TEST_GRAPHS)
    graphs_check()
    assert graph_name_validate(name="t_hitl") == "t_hitl"
    assert graph_name_validate(name=None) == graph_name_validate(name="") == "moderation"


@pytest.mark.parametrize("name", ["nope", "T_HITL", 3, ["moderation"]])
def test_unknown_name_is_refused_listing_the_registered_ones(settings, name):
    settings.REVIEWQUEUE_GRAPHS = dict(TEST_GRAPHS)
    with pytest.raises(UnknownGraph, match="this server runs moderation, t_failing, t_hitl"):
        graph_name_validate(name=name)


@pytest.mark.django_db
def test_item_create_with_an_unknown_graph_creates_nothing(settings):
    settings.REVIEWQUEUE_GRAPHS = dict(TEST_GRAPHS)
    with pytest.raises(ValidationError) as refused:
        item_create(title="t", body="b", source="s", graph="no_such_graph")
    assert "unknown graph 'no_such_graph'" in refused.value.message_dict["graph"][0]
    assert not QueueItem.objects.exists()


@pytest.mark.parametrize(
    ("path", "words"),
    [
        ("moderation.tests.no_such_module:build", "cannot be imported: ModuleNotFoundError"),
        ("moderation.tests.graphs_support:no_such_builder", "cannot be imported: AttributeError"),
        ("moderation.tests.graphs_support", "expected 'module.path:callable'"),
        ("moderation.tests.graphs_support:REFUND", "is not callable"),
    ],
)
def test_a_bad_dotted_path_stops_start_up_naming_the_graph(settings, path, words):
    settings.REVIEWQUEUE_GRAPHS = {**TEST_GRAPHS, "broken": path}
    with pytest.raises(ImproperlyConfigured) as stopped:
        graphs_check()
    assert "REVIEWQUEUE_GRAPHS['broken']" in str(stopped.value) and path in str(stopped.value)
    assert words in str(stopped.value)


@pytest.mark.parametrize(
    ("graphs", "words"),
    [({"t_hitl": TEST_GRAPHS["t_hitl"]}, "must register the built-in 'moderation'"),
     ({**TEST_GRAPHS, "Bad-Name": TEST_GRAPHS["t_hitl"]}, "'Bad-Name' is not a valid graph name")],
)
def test_registry_without_the_built_in_graph_or_with_a_bad_name_is_refused(settings, graphs, words):
    settings.REVIEWQUEUE_GRAPHS = graphs
    with pytest.raises(ImproperlyConfigured, match=words):
        graphs_check()
