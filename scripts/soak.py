"""`make soak`: the nemesis soak (moderation/tests/soak_run.py; docs/contributors/soak.md).

    SOAK_MINUTES=30 SOAK_SEED=1234 .venv/bin/python scripts/soak.py

The history checker it judges with reads Django's models, so Django is set up first (in
development mode, on no database of its own: the cluster's processes get theirs).
"""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "reviewqueue.settings")
os.environ.setdefault("DEBUG", "true")

import django  # noqa: E402

django.setup()

from moderation.tests.soak_run import main  # noqa: E402

sys.exit(main())
