import pytest

from moderation.policies.rules import (
    Policy,
    PolicyInvalid,
    Resolution,
    ask_deadline_weakening,
    policy_parse,
    policy_satisfiable_check,
    policy_weakenings,
    tally_describe,
    tally_resolve,
)


def test_the_default_policy_is_one_decision():
    assert policy_parse(None) == Policy()
    assert not Policy().is_quorum


@pytest.mark.parametrize(
    "value, field",
    [
        ([], "policy"),
        ({"approvals": 0}, "policy.approvals"),
        ({"approvals": True}, "policy.approvals"),
        ({"approvals": "2"}, "policy.approvals"),
        ({"approvals": 51}, "policy.approvals"),
        ({"veto": "yes"}, "policy.veto"),
        ({"quorum": 2}, "policy.quorum"),
        ({"deadline_seconds": 0}, "policy.deadline_seconds"),
        ({"on_deadline": "explode", "deadline_seconds": 5}, "policy.on_deadline"),
        ({"on_deadline": "reject"}, "policy.deadline_seconds"),
    ],
)
def test_a_bad_policy_names_its_field(value, field):
    with pytest.raises(PolicyInvalid) as caught:
        policy_parse(value)
    assert caught.value.field == field


def test_a_submitted_policy_is_laid_over_the_teams():
    team = Policy(approvals=3, veto=True, deadline_seconds=60, on_deadline="reject")
    assert policy_parse({"approvals": 2}, base=team) == Policy(approvals=2, veto=True, deadline_seconds=60, on_deadline="reject")


def test_more_approvals_than_voters_is_refused():
    with pytest.raises(PolicyInvalid, match="3 approvals can never be reached: team x has 2"):
        policy_satisfiable_check(policy=Policy(approvals=3), eligible=2, team="team x")
    policy_satisfiable_check(policy=Policy(approvals=2), eligible=2, team="team x")


TEAM = Policy(approvals=2, veto=True)
WAITS = Policy()
APPROVES, REJECTS, ESCALATES = (Policy(deadline_seconds=60, on_deadline=then) for then in ("approve", "reject", "escalate"))


@pytest.mark.parametrize(
    ("base", "asked", "fields"),
    [
        # Stricter, or the same: accepted.
        (TEAM, {}, []),
        (TEAM, {"approvals": 3}, []),
        (WAITS, {"veto": True}, []),
        (WAITS, {"majority": True}, []),  # a majority is never fewer than one approval
        (Policy(majority=True), {"approvals": 3}, []),
        (WAITS, {"deadline_seconds": 5, "on_deadline": "reject"}, []),  # rejecting approves nothing
        (APPROVES, {"deadline_seconds": 5, "on_deadline": "reject"}, []),
        (APPROVES, {"deadline_seconds": 600}, []),  # the team's auto-approval, later
        (APPROVES, {"on_deadline": ""}, []),  # no auto-approval at all
        (REJECTS, {"deadline_seconds": 5}, []),  # rejected sooner
        (ESCALATES, {"deadline_seconds": 5, "on_deadline": "reject"}, []),  # rejected before it escalates
        (ESCALATES, {"approvals": 2}, []),
        # Weaker: refused, naming each field.
        (TEAM, {"approvals": 1}, ["policy.approvals"]),
        (TEAM, {"veto": False}, ["policy.veto"]),
        (
            TEAM,
            {"approvals": 1, "veto": False, "deadline_seconds": 1, "on_deadline": "approve"},
            ["policy.approvals", "policy.veto", "policy.on_deadline"],
        ),  # issue 28.11: no human left
        (Policy(approvals=3), {"majority": True}, ["policy.majority"]),  # a majority of 3 is 2
        (Policy(majority=True), {"majority": False, "approvals": 50}, ["policy.majority"]),
        (WAITS, {"deadline_seconds": 5, "on_deadline": "approve"}, ["policy.on_deadline"]),
        (REJECTS, {"on_deadline": "approve"}, ["policy.on_deadline"]),
        (APPROVES, {"deadline_seconds": 5}, ["policy.deadline_seconds"]),  # approves sooner
        (REJECTS, {"deadline_seconds": 600}, ["policy.deadline_seconds"]),  # approvable for longer
        (REJECTS, {"on_deadline": ""}, ["policy.on_deadline"]),
        (ESCALATES, {"on_deadline": ""}, ["policy.on_deadline"]),
        (ESCALATES, {"deadline_seconds": 5}, ["policy.deadline_seconds"]),
        (ESCALATES, {"deadline_seconds": 600, "on_deadline": "reject"}, ["policy.deadline_seconds"]),
        (WAITS, {"deadline_seconds": 5, "on_deadline": "escalate"}, ["policy.on_deadline"]),
    ],
)
def test_a_submitter_may_make_a_policy_stricter_never_weaker(base, asked, fields):
    assert [field for field, _ in policy_weakenings(base=base, asked=policy_parse(asked, base=base))] == fields


QUORUM2 = Policy(approvals=2)
VETO2 = Policy(approvals=2, veto=True)


@pytest.mark.parametrize(
    "policy, votes, eligible, expected",
    [
        (QUORUM2, {"a": "approve"}, 3, None),
        (QUORUM2, {"a": "approve", "b": "approve"}, 3, Resolution("approve", "quorum")),
        # Without veto a rejection is a vote: still reachable with c, then out of reach.
        (QUORUM2, {"a": "reject"}, 3, None),
        (QUORUM2, {"a": "reject", "b": "reject"}, 3, Resolution("reject", "impossible")),
        (QUORUM2, {"a": "approve", "b": "reject"}, 2, Resolution("reject", "impossible")),
        (VETO2, {"a": "approve", "b": "reject"}, 5, Resolution("reject", "veto")),
        # Majority of 4 is 3; 2 rejections leave 2 possible approvals: impossible.
        (Policy(majority=True), {"a": "approve", "b": "approve"}, 4, None),
        (Policy(majority=True), {"a": "approve", "b": "approve", "c": "approve"}, 4, Resolution("approve", "quorum")),
        (Policy(majority=True), {"a": "reject", "b": "reject"}, 4, Resolution("reject", "impossible")),
        # A supervisor outside the eligible count still counts as a voter.
        (QUORUM2, {"a": "approve", "boss": "approve"}, 1, Resolution("approve", "quorum")),
    ],
)
def test_a_tally_resolves_as_soon_as_the_outcome_is_certain(policy, votes, eligible, expected):
    assert tally_resolve(policy=policy, votes=votes, eligible=eligible) == expected


def test_a_tally_in_words():
    votes = [("alice", "approve"), ("bob", "approve"), ("carol", "reject")]
    text = tally_describe(policy=Policy(approvals=3, veto=True), votes=votes, eligible=4, resolution=Resolution("reject", "veto"))
    assert text == "2 of 3 approvals: alice, bob · carol rejected — vetoed"


@pytest.mark.parametrize(
    ("policy", "seconds", "why"),
    [
        (APPROVES, 2, "deadline_seconds 2 approves sooner than its approve after 60 s"),  # issue 41: the probe's bypass
        (APPROVES, 600, None),  # the auto-approval later: stricter
        (REJECTS, 5, None),  # rejected sooner
        (REJECTS, 600, "deadline_seconds 600 is later than its reject after 60 s"),
        (ESCALATES, 5, "its escalation (escalate after 60 s) cannot be moved"),
        (WAITS, 5, None),  # nothing happens at it: it only shows
        (APPROVES, 10**15, "deadline_seconds must be a whole number from 1 to 2592000"),
    ],
)
def test_an_asks_own_deadline_is_judged_as_a_submitted_policys_over_its_items(policy, seconds, why):
    assert ask_deadline_weakening(policy=policy, seconds=seconds) == why
