"""reviewqueue.heap: the server's startup heap is frozen out of the collector's sight."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_server_freezes_its_startup_heap_once_the_urlconf_is_loaded(tmp_path):
    # A process of its own: importing the ASGI application here would freeze the test run's heap.
    probe = (
        "import gc, sys\n"
        "import reviewqueue.asgi\n"
        "frozen = gc.get_freeze_count()\n"
        "loaded = 'moderation.web.views' in sys.modules and 'moderation.api' in sys.modules\n"
        "gc.collect()\n"
        "print(frozen, len(gc.get_objects(generation=2)), loaded)\n"
    )
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}", "DJANGO_SETTINGS_MODULE": "reviewqueue.settings"}
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    frozen, still_scanned, loaded = out.stdout.split()
    # Most of what startup leaves is frozen: a full collection walks a small remainder.
    assert int(frozen) > 100_000 and int(still_scanned) < int(frozen) // 10, out.stdout
    assert loaded == "True"  # the URLconf's views and API are in the frozen part, not left to the first request
