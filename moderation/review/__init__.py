"""The guard and the services beside it: ``decisions`` (one winner per item, its locking
contract in its docstring), ``items`` and ``submissions`` (creating items and starting
their graphs), ``apply`` (the worker's half: resuming a decided graph), ``bulk``,
``deadlines``, ``reconcile`` and ``recovery``. Above ``records``, ``delivery``, ``graphs``,
``policies`` and ``core``; the pages, sockets, API and lab above it call in."""
