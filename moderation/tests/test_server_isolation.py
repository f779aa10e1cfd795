"""One server process decides items concurrently: a decision stalled inside the guard
holds up no request for another item (Django runs each request's sync view in a
thread of its own under ASGI, and the guard's locks are per item)."""

import time
from concurrent.futures import ThreadPoolExecutor

from e2e.server import LiveServer
from moderation.tests.real_server import Reviewer

STALL = 3.0
ITEMS = 3


def test_stalled_decisions_on_different_items_overlap_in_one_process(tmp_path):
    server = LiveServer(tmp_path, db_name="isolation")
    seeded = server.seed(users=["alice", "bob", "carol"], items=ITEMS + 1, prefix="Isolation")
    reviewers = [Reviewer(server, name, seeded.sessions[name]) for name in ("alice", "bob", "carol")]
    try:
        # Every decision sleeps STALL seconds while holding its item's lock.
        server.start(faults=f"after_item_lock:sleep={STALL}")
        start = time.monotonic()
        with ThreadPoolExecutor(max_workers=ITEMS) as pool:
            answers = list(pool.map(lambda pair: pair[0].decide(pair[1], "approve"), zip(reviewers, seeded.items, strict=False)))
        together = time.monotonic() - start
        # The baseline, on the same server under the same load: one stalled decision alone.
        start = time.monotonic()
        answers.append(reviewers[0].decide(seeded.items[ITEMS], "approve"))
        alone = time.monotonic() - start
    finally:
        server.close()
    assert [status for status, _ in answers] == [200] * (ITEMS + 1), answers
    # Serialized, three stalled decisions take three times one alone; overlapping, about one.
    assert together < 2 * alone, f"{ITEMS} stalled decisions on different items took {together:.1f} s, one alone {alone:.1f} s"
