"""How the settings read the environment: django-environ's typed reads, made strict.

django-environ reads any boolean it does not know as false (``CLAIMS_ENABLED=of`` would turn
claims off), parses ``5s`` as the float 5, and reads a value starting with ``$`` as the name of
another variable (a generated ``SECRET_KEY`` may start with one). Here a value is what it says,
and one that is not a known spelling of its type stops the process at start-up, naming the
variable and the value.
"""

import environ
from django.core.exceptions import ImproperlyConfigured

_KINDS = {bool: "true or false", int: "a whole number", float: "a number"}


class StrictEnv(environ.Env):
    # django-environ's true words, and their opposites; the empty string is false, as before.
    BOOLEAN_FALSE_STRINGS = ("false", "off", "no", "n", "0", "")

    def get_value(self, var, cast=None, default=environ.Env.NOTSET, parse_default=False):
        raw = self.ENVIRON.get(var)
        # An empty number is an unset one (an env file's ``METRICS_WORKER_PORT=``).
        if raw is None or (raw == "" and cast in (int, float)):
            if default is self.NOTSET:
                raise ImproperlyConfigured(f"Set the {var} environment variable")
            return default
        try:
            return self.parse_value(raw, cast)
        except ValueError:
            raise ImproperlyConfigured(f"{var} must be {_KINDS.get(cast, 'valid')}, not {raw!r}") from None

    @classmethod
    def parse_value(cls, value, cast):
        if cast is bool:
            word = value.strip().lower()
            if word in cls.BOOLEAN_TRUE_STRINGS or word in cls.BOOLEAN_FALSE_STRINGS:
                return word in cls.BOOLEAN_TRUE_STRINGS
            raise ValueError(value)
        if cast is float:
            return float(value)
        return super().parse_value(value, cast)

    def choice(self, var: str, default: str, choices: tuple[str, ...]) -> str:
        value = self.str(var, default)
        if value not in choices:
            raise ImproperlyConfigured(f"{var} must be one of {', '.join(choices)}, not {value!r}")
        return value


env = StrictEnv()
