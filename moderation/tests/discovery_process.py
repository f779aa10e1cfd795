"""A discoverer of a LangGraph deployment's interrupts in a process of its own: one worker of the
two-process race in ``test_deployment_races`` (``discovery_processes`` starts them).

    python -m moderation.tests.discovery_process ROLE BARRIER_DIR DEPLOYMENT THREAD_ID...

ROLE is what the worker does once both are up (a barrier of files in BARRIER_DIR):
``webhook`` (what the worker does with each thread's run webhook, ``deployment_thread_discover``), ``sweep`` (the worker's
sweep, ``deployment_sweep``), or ``naive`` (the negative control: check whether an item asks
about the thread's interrupts, wait until the other worker has checked too, then create one
without the key the database holds). The database is the test's (``DATABASE_URL``).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

BARRIER_TIMEOUT = 60.0


def barrier(directory: Path, name: str, parties: int = 2) -> None:
    """Wait until ``parties`` processes have reached ``name`` (each leaves a file there)."""
    (directory / f"{name}.{os.getpid()}").touch()
    deadline = time.monotonic() + BARRIER_TIMEOUT
    while len(list(directory.glob(f"{name}.*"))) < parties:
        if time.monotonic() > deadline:
            raise TimeoutError(f"barrier {name}: the other process never came")
        time.sleep(0.005)


def naive_discover(*, deployment, thread_id: str, directory: Path) -> None:
    from moderation.core.dbpool import connection_release
    from moderation.graphs.remote import remote_thread_read
    from moderation.items.models import QueueItem
    from moderation.review.items import item_create
    from moderation.review.remote import deployment_connection

    connection_release()  # naive about the key only: it holds no connection while the deployment answers
    thread = remote_thread_read(connection=deployment_connection(deployment), thread_id=thread_id)
    ids = {i.interrupt_id for i in thread.interrupts}
    known = any(
        ids & {a["interrupt_id"] for a in row.get("asks", [])}
        for row in QueueItem.objects.filter(graph_input__external__thread_id=thread_id).values_list("graph_input", flat=True)
    )
    barrier(directory, f"checked-{thread_id}")
    if not known:
        asks = [{"interrupt_id": i.interrupt_id, "value": i.value} for i in thread.interrupts]
        item_create(
            title="naive",
            body="naive",
            source="naive",
            graph="ask",
            graph_input={"asks": asks, "external": {"thread_id": thread_id}},
        )


def main(role: str, directory: str, name: str, thread_ids: list[str]) -> None:
    import django

    django.setup()
    from moderation.review.deployments import deployment_sweep, deployment_thread_discover
    from moderation.review.models import Deployment

    deployment = Deployment.objects.select_related("client").get(name=name)
    barrier(Path(directory), "start")
    if role == "sweep":
        deployment_sweep(deployment=deployment)
    for thread_id in thread_ids if role != "sweep" else []:
        if role == "webhook":
            deployment_thread_discover(deployment_id=deployment.pk, thread_id=thread_id)
        else:
            naive_discover(deployment=deployment, thread_id=thread_id, directory=Path(directory))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:])
