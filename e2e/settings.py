"""Settings of the server under e2e test: the project's own, with a fast password hasher.

Every browser context logs in through the real login form. With PBKDF2's million
iterations each login costs the server about a second of CPU on a busy 2-core machine,
and logins are serialised, so the suite's two dozen logins took a third of its time.
Nothing the e2e tests check depends on how passwords are hashed. The demo (`make demo`)
runs with the project's settings unchanged.
"""

from reviewqueue.settings import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
