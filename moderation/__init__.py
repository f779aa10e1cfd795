"""reviewqueue's app. Its packages, from the bottom up; each imports only from those below it
(``make test`` checks this with import-linter, contracts in ``.importlinter``, which also
forbids import circles between the modules of one package):

- ``core``: locks, the checkpointer, fault points, the task queue's view, permissions; no domain.
- ``items``: the item and its asks (``QueueItem``, ``ReviewAsk``) and the enums of their states.
- ``graphs`` and ``policies``: the LangGraph side (the registry, runs, asks) and who may decide.
- ``records``: what the guard writes and reads besides the item: events, the audit ledger,
  counters, outcomes, reasons, claims, and the read queries (selectors, timeline).
- ``delivery``: webhooks, recorded in the guard's transaction and sent by the worker.
- ``review``: the guard (``decisions``) and the services beside it: items, submissions,
  apply, bulk decisions, deadlines, reconcile and recovery.
- ``live``: the websockets (consumers, presence, rights changes) and the caps on long-poll waits.
- ``web``, ``api``: the pages and the service API.
- ``lab``: a development app of its own (label ``lab``): the race lab with its history checker,
  fault injection (REVIEWQUEUE_FAULTS) and the soak's judge. Installed with DEBUG on, and with
  DEBUG off only when REVIEWQUEUE_LAB=true; nothing above but the tests imports it.

Each package's models are in its own ``models`` module (import them from there); the app's
``models`` only imports those modules, so that Django registers them. Django's own modules
(``models``, ``apps``, ``admin``, ``urls``, ``migrations``, ``management``) and ``demo`` stay at
the top of the app, where Django looks for them.
"""
