"""`make soak`: the nemesis soak (moderation/tests/soak_run.py; docs/contributors/soak.md).

    SOAK_MINUTES=30 SOAK_SEED=1234 .venv/bin/python scripts/soak.py

The history checker it judges with reads Django's models, so Django is set up first (in
development mode, on no database of its own: the cluster's processes get theirs).
"""

import os
import sys
from pathlib import Path


def soak() -> int:
    # Inside main only: the tests' fork server (e2e/forked.py) imports this script again in each process it
    # forks, before that process takes its own environment.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "reviewqueue.settings")
    os.environ.setdefault("DEBUG", "true")
    import django

    django.setup()
    from moderation.tests.soak_run import main

    return main()


if __name__ == "__main__":
    sys.exit(soak())
