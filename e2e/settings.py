"""Settings of the server under e2e test: the project's own, with a fast password hasher.

Every browser context logs in through the real login form. With PBKDF2's million
iterations each login costs the server about a second of CPU on a busy 2-core machine,
and logins are serialised, so the suite's two dozen logins took a third of its time.
Nothing the e2e tests check depends on how passwords are hashed. The demo (`make demo`)
runs with the project's settings unchanged.
"""

from reviewqueue.environment import env
from reviewqueue.settings import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# The race and live tests judge the winner's own page of the decided item; the tests of
# "next item" (e2e/test_claims.py) turn it back on for their servers.
NEXT_ITEM_AFTER_DECISION = env.bool("NEXT_ITEM_AFTER_DECISION", False)
