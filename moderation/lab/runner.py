"""One lab run: the race per strategy × mode, the slow reviewer, the isolation check.

The lab decides its own items (``QueueItem.is_lab``) as its own users (created fresh
for each run, marked by a ``LabAccount`` row, unusable passwords), without live
broadcasts, and removes them afterwards together with their checkpoint threads, so a
run against the live deployment leaves every other row as it found it. Lab rows are
found by those markers only, never by a name or a source someone else could also use.

Every lab item belongs to one of the run's two teams (so a real team claiming the
source or the graph never takes it): the racers' team, whose members are exactly the
racing reviewers (a quorum's N and a majority are counted among them), and the run's
team of all its reviewers, for the other experiments and as the racers' team's
escalation target. Both are named after the run's id, which only the run's
``LabAccount`` rows hold, and are removed with them.
"""

from __future__ import annotations

import random
import statistics
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser, Group
from django.db import connection, transaction
from django.test.utils import override_settings
from django.utils import timezone

from moderation.core.checkpointer import checkpointer_get
from moderation.core.faults import fault_inject
from moderation.core.permissions import MODERATORS_GROUP
from moderation.demo import DEMO_AGENT_ITEMS, DEMO_ITEMS, REFUND_AGENT, demo_agent_input
from moderation.graphs.registry import DEFAULT_GRAPH, graph_name_validate
from moderation.graphs.runtime import graph_asks_pending, graph_is_finished
from moderation.items.models import QueueItem
from moderation.lab.attempts import DEADLINE_DECISION, Attempt, attempt_run
from moderation.lab.harness import ReviewerProcesses, decision_for, race_threads, reviewer_processes
from moderation.lab.strategies import HOLD_POINT, STRATEGIES, lab_reason
from moderation.policies.models import APPROVALS_MAX, OnDeadline, Team
from moderation.policies.rules import DEADLINE_USERNAME, Policy, PolicyInvalid, policy_parse
from moderation.policies.teams import team_member_add
from moderation.records.audit import audit_items_purge
from moderation.records.models import AttemptOrigin, LabAccount
from moderation.review.deadlines import deadline_account
from moderation.review.decisions import item_decide
from moderation.review.items import lab_item_create

LAB_USER_PREFIX = "lab-reviewer-"
MODES = ("threads", "processes")
# Reviewers deciding other items while one reviewer holds item X.
SLOW_OTHERS = 3
# Longer than any hold the lab allows, so a stuck slow reviewer is reported, not waited on.
SLOW_ENTER_TIMEOUT = 30.0
# An empty REDIS_URL gives each reviewer process a private in-memory channel layer, so
# the guarded path's broadcasts from there reach nobody (see lab_run).
_QUIET_CHILD = {"REDIS_URL": ""}

Progress = Callable[[int, int, str], None]


class LabConfigError(ValueError):
    """An option the lab cannot run with; the message says which and why."""


@dataclass(frozen=True)
class LabConfig:
    strategies: tuple[str, ...]
    modes: tuple[str, ...]
    trials: int
    reviewers: int
    delay: float  # seconds: the check-to-act window of the unguarded strategies
    hold: float  # seconds the slow reviewer holds item X
    seed: int
    time_limit: float | None  # seconds after which no new strategy × mode is started
    graph: str = DEFAULT_GRAPH  # the graph the lab's items run (REVIEWQUEUE_GRAPHS)
    policies: tuple[str, ...] = ()  # --policy as given: quorum:N, veto, majority
    policy: dict[str, Any] | None = None  # the raced items' policy (moderation.policies.rules), None: the default
    deadline_s: int | None = None  # the raced items' deadline; the deadline then races too

    @property
    def racers(self) -> int:
        """Competitors per item: the reviewers, and the deadline when there is one."""
        return self.reviewers + (1 if self.deadline_s else 0)


LIMITS = {"trials": (1, 1000), "reviewers": (2, 32), "delay_ms": (0.0, 5000.0), "hold_s": (0.05, 30.0)}
DEADLINE_MAX_S = 60
ON_DEADLINE = (OnDeadline.REJECT.value, OnDeadline.APPROVE.value, OnDeadline.ESCALATE.value)


def lab_config_build(
    *,
    strategies: Sequence[str] | None,
    mode: str,
    trials: int,
    reviewers: int,
    delay_ms: float,
    hold_s: float,
    seed: int | None,
    time_limit: float | None,
    graph: str = DEFAULT_GRAPH,
    policies: Sequence[str] | None = None,
    deadline: str | None = None,
    on_deadline: str | None = None,
) -> LabConfig:
    """Check every option; raise LabConfigError naming the first bad one."""
    chosen = tuple(dict.fromkeys(strategies or STRATEGIES))
    unknown = [s for s in chosen if s not in STRATEGIES]
    if unknown:
        raise LabConfigError(f"unknown strategy {unknown[0]!r}; choose from {', '.join(STRATEGIES)}")
    if mode not in (*MODES, "both"):
        raise LabConfigError(f"--mode must be threads, processes or both, not {mode!r}")
    for name, value in (("trials", trials), ("reviewers", reviewers), ("delay_ms", delay_ms), ("hold_s", hold_s)):
        low, high = LIMITS[name]
        if not low <= value <= high:
            raise LabConfigError(f"--{name.split('_')[0]} must be between {low:g} and {high:g}, not {value:g}")
    if time_limit is not None and time_limit <= 0:
        raise LabConfigError(f"--time-limit must be a positive number of seconds, not {time_limit:g}")
    if seed is not None and seed < 0:
        raise LabConfigError(f"--seed must be zero or positive, not {seed}")
    try:
        graph_name_validate(name=graph)
    except ValueError as exc:
        raise LabConfigError(f"--graph: {exc}") from None
    policy, deadline_s = lab_policy_build(specs=policies or (), deadline=deadline, on_deadline=on_deadline, reviewers=reviewers)
    return LabConfig(
        strategies=chosen,
        modes=MODES if mode == "both" else (mode,),
        trials=trials,
        reviewers=reviewers,
        delay=delay_ms / 1000,
        hold=hold_s,
        seed=random.SystemRandom().randrange(2**31) if seed is None else seed,
        time_limit=time_limit,
        graph=graph,
        policies=tuple(policies or ()),
        policy=policy,
        deadline_s=deadline_s,
    )


def lab_policy_build(
    *,
    specs: Sequence[str],
    deadline: str | None,
    on_deadline: str | None,
    reviewers: int,
) -> tuple[dict[str, Any] | None, int | None]:
    """The raced items' policy from ``--policy`` (quorum:N, veto, majority; repeatable),
    ``--deadline`` (whole seconds: 1s) and ``--on-deadline``; None when none is given.
    Refuses a quorum the racing reviewers could never reach."""
    approvals, majority, veto = 1, False, False
    for spec in specs:
        name, colon, arg = spec.partition(":")
        if name == "quorum" and colon:
            if not (arg.isascii() and arg.isdigit()) or not 2 <= int(arg) <= APPROVALS_MAX:
                raise LabConfigError(
                    f"--policy quorum:N needs N, the approvals, a whole number from 2 to {APPROVALS_MAX}, not {arg!r}"
                )
            approvals = int(arg)
        elif spec == "veto":
            veto = True
        elif spec == "majority":
            majority = True
        else:
            raise LabConfigError(f"unknown --policy {spec!r}; use quorum:N (N approvals), veto or majority")
    if majority and approvals > 1:
        raise LabConfigError("--policy majority and quorum:N do not combine; choose one")
    if approvals > reviewers:
        raise LabConfigError(
            f"--policy quorum:{approvals} can never be reached by {reviewers} reviewers; give --reviewers {approvals} or more"
        )
    deadline_s = None
    if deadline is not None:
        number = deadline.removesuffix("s")
        if not (number.isascii() and number.isdigit()) or not 1 <= int(number) <= DEADLINE_MAX_S:
            raise LabConfigError(f"--deadline must be whole seconds from 1 to {DEADLINE_MAX_S}, like 1s, not {deadline!r}")
        deadline_s = int(number)
    if on_deadline is not None:
        if deadline_s is None:
            raise LabConfigError("--on-deadline needs --deadline")
        if on_deadline not in ON_DEADLINE:
            raise LabConfigError(f"--on-deadline must be {', '.join(ON_DEADLINE)}, not {on_deadline!r}")
    if not specs and deadline_s is None:
        return None, None
    policy = Policy(
        approvals=approvals,
        majority=majority,
        veto=veto,
        deadline_seconds=deadline_s,
        on_deadline=(on_deadline or OnDeadline.REJECT.value) if deadline_s else OnDeadline.NOTHING.value,
    )
    try:
        return policy_parse(policy.as_json()).as_json(), deadline_s
    except PolicyInvalid as exc:  # the product's own rules, should the lab's ever drift from them
        raise LabConfigError(f"--policy: {exc}") from None


def lab_run(*, config: LabConfig, progress: Progress | None = None) -> dict[str, Any]:
    """Run every experiment in ``config``; return the report (see the racelab command).

    The caller holds the lab lock: the clean-up at the start removes leftovers of an
    interrupted run, which would be a running run's items without the lock.
    """
    rng = random.Random(config.seed)
    cells = [(s, m) for s in config.strategies for m in config.modes]
    total = len(cells) * config.trials * config.racers + len(config.strategies) + 1
    ticker = _Ticker(total=total, progress=progress)
    started, clock = timezone.now(), time.monotonic()
    lab_cleanup()
    # The guarded strategy is the product's own path, which broadcasts every decision to
    # the live dashboard. The lab runs in a process of its own (the command, or the page's
    # run), so turning the channel layer off here keeps its decisions off real screens.
    with override_settings(CHANNEL_LAYERS={}):
        try:
            usernames = lab_users_create(count=max(config.reviewers, SLOW_OTHERS + 1))
            teams = lab_teams_create(usernames=usernames, racers=config.reviewers)
            if config.deadline_s:
                deadline_account()  # the product's own, as a worker's first sweep would create it
            results, skipped = [], []
            for mode in config.modes:
                # One set of reviewer processes serves every strategy: each costs a Django set-up.
                processes = reviewer_processes(size=config.racers, extra_env=_QUIET_CHILD) if mode == "processes" else None
                with processes or nullcontext() as pool:
                    for strategy in config.strategies:
                        if config.time_limit is not None and time.monotonic() - clock > config.time_limit:
                            skipped.append({"strategy": strategy, "mode": mode})
                            ticker.advance(config.trials * config.racers, f"{strategy}/{mode} skipped (time limit)")
                            continue
                        results.append(
                            race_cell(
                                strategy=strategy,
                                mode=mode,
                                config=config,
                                usernames=usernames,
                                rng=rng,
                                ticker=ticker,
                                pool=pool,
                                team=teams.racers,
                            )
                        )
            results.sort(key=lambda r: cells.index((r["strategy"], r["mode"])))
            slow = []
            for strategy in config.strategies:
                slow.append(
                    slow_reviewer_measure(
                        strategy=strategy,
                        hold=config.hold,
                        delay=config.delay,
                        usernames=usernames,
                        rng=rng,
                        graph=config.graph,
                        team=teams.everyone,
                    )
                )
                ticker.advance(1, f"slow reviewer: {strategy}")
            isolation = isolation_check(username=usernames[0], rng=rng, graph=config.graph, team=teams.everyone)
            ticker.advance(1, "isolation check")
        finally:
            lab_cleanup()
    return {
        "started_at": started.isoformat(),
        "seconds": round(time.monotonic() - clock, 2),
        "database": connection.vendor,
        "checkpointer": type(checkpointer_get()).__name__,
        "config": {
            **asdict(config),
            "delay_ms": config.delay * 1000,
            "strategies": list(config.strategies),
            "modes": list(config.modes),
        },
        "results": results,
        "skipped": skipped,
        "slow_reviewer": slow,
        "isolation": isolation,
    }


class _Ticker:
    """Counts work done for the progress callback; safe to call from racing threads."""

    def __init__(self, *, total: int, progress: Progress | None) -> None:
        self.total, self.done, self.progress = total, 0, progress
        self._lock = threading.Lock()

    def advance(self, n: int, label: str) -> None:
        with self._lock:
            self.done += n
            if self.progress is not None:
                self.progress(self.done, self.total, label)


def race_cell(
    *,
    strategy: str,
    mode: str,
    config: LabConfig,
    usernames: Sequence[str],
    rng: random.Random,
    ticker: _Ticker,
    pool: ReviewerProcesses | None,
    team: str,
) -> dict[str, Any]:
    """``config.trials`` fresh items of ``team``, each raced by ``config.reviewers`` reviewers
    at once (threads of this process, or the processes of ``pool``), and by the deadline
    when the items have one, everyone acting at the item's deadline."""
    items = [
        str(item.public_id)
        for item in lab_items_create(count=config.trials, rng=rng, graph=config.graph, team=team, policy=config.policy)
    ]
    # The shuffle decides who approves, who rejects and who starts first.
    names = rng.sample(list(usernames[: config.reviewers]), config.reviewers)
    decisions = [decision_for(i) for i in range(config.reviewers)]
    if config.deadline_s:
        names.append(DEADLINE_USERNAME)
        decisions.append(DEADLINE_DECISION)
    label = f"{strategy}/{mode}"

    def tick(_attempt: Attempt) -> None:
        ticker.advance(1, label)

    race = race_threads if pool is None else pool.race
    report = race(
        strategy=strategy,
        items=items,
        usernames=names,
        delay=config.delay,
        on_attempt=tick,
        decisions=decisions,
        at_deadline=bool(config.deadline_s),
    )
    lab_items_remove()
    errors = report.errors
    return {
        "strategy": strategy,
        "mode": mode,
        "trials": config.trials,
        "reviewers": config.reviewers,
        "lost_decisions": report.lost_decisions,
        "false_successes": report.false_successes,
        "double_resumes": report.double_resumes,
        "double_resolutions": report.double_resolutions,
        "votes_lost": report.votes_lost,
        "deadline_wins": report.deadline_wins,
        "misinformed_losers": report.misinformed_losers,
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
        "p50_ms": round(report.latency_ms(percentile=50), 1),
        "p99_ms": round(report.latency_ms(percentile=99), 1),
        "decisions_per_s": round(report.decisions_per_second, 1),
    }


def slow_reviewer_measure(
    *,
    strategy: str,
    hold: float,
    delay: float,
    usernames: Sequence[str],
    rng: random.Random,
    graph: str = DEFAULT_GRAPH,
    team: str | None = None,
) -> dict[str, Any]:
    """One reviewer holds item X for ``hold`` seconds inside the strategy's exclusion while
    others decide other items; their latency against an unheld baseline is the wait X caused."""
    decide = STRATEGIES[strategy]
    users = _users_get(usernames[: SLOW_OTHERS + 1])
    slow_user, others = users[0], users[1:]
    x, *rest = lab_items_create(count=1 + 2 * SLOW_OTHERS, rng=rng, graph=graph, team=team)
    baseline_items, held_items = rest[:SLOW_OTHERS], rest[SLOW_OTHERS:]
    baseline = _decide_together(decide, items=baseline_items, users=others, delay=delay)

    x_key = str(x.public_id)
    inside = threading.Event()

    def hold_x(key: str) -> None:
        if key == x_key:
            inside.set()
            time.sleep(hold)

    slow_result: list[Attempt] = []
    with fault_inject(HOLD_POINT, hold_x):
        slow = threading.Thread(target=_decide_one, args=(decide, x, slow_user, delay, slow_result))
        slow.start()
        entered = inside.wait(timeout=SLOW_ENTER_TIMEOUT)
        during = _decide_together(decide, items=held_items, users=others, delay=delay) if entered else []
        slow.join()
    lab_items_remove()

    errors = [a.error for a in (*baseline, *during, *slow_result) if a.error]
    if not entered:
        errors.insert(0, "the slow reviewer never reached the strategy's lock")
    baseline_p50 = statistics.median([a.latency_ms for a in baseline] or [0.0])
    during_p50 = statistics.median([a.latency_ms for a in during] or [0.0])
    return {
        "strategy": strategy,
        "hold_s": hold,
        "others": len(others),
        "baseline_p50_ms": round(baseline_p50, 1),
        "during_p50_ms": round(during_p50, 1),
        "during_max_ms": round(max((a.latency_ms for a in during), default=0.0), 1),
        "waited_ms": round(max(0.0, during_p50 - baseline_p50), 1),
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
    }


def _decide_one(decide, item: QueueItem, user: AbstractBaseUser, delay: float, out: list[Attempt]) -> None:
    try:
        out.append(attempt_run(decide, item=str(item.public_id), user=user, decision="approve", delay=delay))
    finally:
        connection.close()


def _decide_together(decide, *, items: Sequence[QueueItem], users: Sequence[AbstractBaseUser], delay: float) -> list[Attempt]:
    """Each user decides its own item, all released together."""
    barrier = threading.Barrier(len(users))
    results: list[Attempt] = []
    results_lock = threading.Lock()

    def run(item: QueueItem, user: AbstractBaseUser) -> None:
        barrier.wait(timeout=SLOW_ENTER_TIMEOUT)
        mine: list[Attempt] = []
        _decide_one(decide, item, user, delay, mine)
        with results_lock:
            results.extend(mine)

    threads = [threading.Thread(target=run, args=pair) for pair in zip(items, users, strict=False)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def isolation_check(
    *,
    username: str,
    rng: random.Random,
    graph: str = DEFAULT_GRAPH,
    team: str | None = None,
) -> dict[str, Any]:
    """The seed's third section on the product: A and C decided, B never resumed."""
    reviewer = _users_get([username])[0]
    a, b, c = lab_items_create(count=3, rng=rng, titles=("A", "B", "C"), graph=graph, team=team)
    item_decide(item_public_id=a.public_id, reviewer=reviewer, decision="approve", origin=AttemptOrigin.LAB)
    item_decide(
        item_public_id=c.public_id, reviewer=reviewer, decision="reject", reason=lab_reason("reject"), origin=AttemptOrigin.LAB
    )
    report = {}
    for name, item in (("A", a), ("B", b), ("C", c)):
        item.refresh_from_db()
        report[name] = {
            "thread_id": item.thread_id,
            "status": item.status,
            "waiting_on": [p.interrupt_id for p in graph_asks_pending(name=item.graph, thread_id=item.thread_id)],
            "finished": graph_is_finished(name=item.graph, thread_id=item.thread_id),
        }
    lab_items_remove()
    b_paused = bool(report["B"]["waiting_on"]) and report["B"]["status"] == "pending"
    a_c_finished = report["A"]["finished"] and report["C"]["finished"]
    return {"items": report, "b_still_paused": b_paused, "a_and_c_finished": a_c_finished, "passed": b_paused and a_c_finished}


def lab_users_create(*, count: int) -> list[str]:
    """``count`` new moderators for this run, marked as the lab's and unable to log in.

    Every user is inserted, never looked up: a name that exists already (however unlikely,
    the names carry a random run id) fails the run before it starts, instead of handing a
    real account the moderator role.
    """
    User = get_user_model()
    group = Group.objects.get(name=MODERATORS_GROUP)
    run = uuid.uuid4()
    names = [f"{LAB_USER_PREFIX}{run.hex[:12]}-{n}" for n in range(1, count + 1)]
    with transaction.atomic():
        for name in names:
            user = User(username=name)
            user.set_unusable_password()
            user.save(force_insert=True)
            LabAccount.objects.create(user=user, run=run)
            user.groups.add(group)
    return names


@dataclass(frozen=True)
class LabTeams:
    racers: str  # slugs
    everyone: str


def lab_teams_create(*, usernames: Sequence[str], racers: int) -> LabTeams:
    """The run's two teams (module docstring), named after the run of ``usernames``' LabAccount;
    the first ``racers`` users race."""
    users = _users_get(usernames)
    slugs = _lab_team_slugs(users[0].lab_account.run)
    with transaction.atomic():
        everyone = Team.objects.create(slug=slugs.everyone, name="race lab: all reviewers")
        # The lab's items carry the run's policy, whatever it is (a deadline that approves, say).
        racing = Team.objects.create(slug=slugs.racers, name="race lab: racers", escalate_to=everyone, allow_weaker_policies=True)
        for n, user in enumerate(users):
            team_member_add(team=everyone, user=user)
            if n < racers:
                team_member_add(team=racing, user=user)
    return slugs


def _lab_team_slugs(run: uuid.UUID) -> LabTeams:
    return LabTeams(racers=f"racelab-{run.hex}-race", everyone=f"racelab-{run.hex}-all")


def _users_get(usernames: Sequence[str]) -> list[AbstractBaseUser]:
    by_name = {u.get_username(): u for u in get_user_model().objects.filter(username__in=usernames)}
    return [by_name[name] for name in usernames]


# The agent's lab items ask once and finish on any decision: a race is judged on one
# ask per item, and the isolation check expects A and C finished after theirs.
LAB_AGENT_ITEMS = [(title, body) for title, body, rounds in DEMO_AGENT_ITEMS if rounds == 1]


def lab_items_create(
    *,
    count: int,
    rng: random.Random,
    titles: Sequence[str] | None = None,
    graph: str = DEFAULT_GRAPH,
    team: str | None = None,
    policy: dict[str, Any] | None = None,
) -> list[QueueItem]:
    """Fresh lab items paused at review (lab runs turn the channel layer off, so no page hears of them)."""
    texts = LAB_AGENT_ITEMS if graph == REFUND_AGENT else DEMO_ITEMS
    items = []
    for n in range(count):
        title, body = rng.choice(texts)
        if titles is not None:
            title = titles[n]
        graph_input = demo_agent_input(message=body) if graph == REFUND_AGENT else None
        items.append(
            lab_item_create(title=f"[racelab] {title}", body=body, graph=graph, graph_input=graph_input, team=team, policy=policy)
        )
    return items


def lab_items_remove() -> int:
    """Delete every lab item, its attempts and its checkpoint thread; return how many items."""
    # The sanctioned removal: the audit ledger keeps a signed purge entry per item.
    thread_ids = audit_items_purge(items=QueueItem.objects.filter(is_lab=True))
    saver = checkpointer_get()
    for thread_id in thread_ids:
        saver.delete_thread(thread_id)
    return len(thread_ids)


def lab_cleanup() -> None:
    """Remove lab items, then the lab's teams (items PROTECT their team), then lab users
    (items PROTECT the users who decided them).

    Only users the lab created (those with a LabAccount) are removed; their group
    membership and marker go with them. Any other row referencing one (it never should)
    PROTECTs it, so the clean-up fails rather than touch a real row. Only teams named
    after a lab run's id are removed, the racers' team first (it escalates to the other).
    """
    lab_items_remove()
    for run in set(LabAccount.objects.values_list("run", flat=True)):
        slugs = _lab_team_slugs(run)
        Team.objects.filter(slug=slugs.racers).delete()
        Team.objects.filter(slug=slugs.everyone).delete()
    get_user_model().objects.filter(lab_account__isnull=False).delete()
