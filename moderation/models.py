"""Where Django loads the app's models from. Each model is defined in the package that owns it
(``moderation/<package>/models.py``, under the layers of ``.importlinter``) and imported from there,
never from here: this module only imports those modules, so that Django registers their models."""

import moderation.delivery.models  # noqa: F401
import moderation.items.models  # noqa: F401
import moderation.live.models  # noqa: F401
import moderation.policies.models  # noqa: F401
import moderation.records.models  # noqa: F401
import moderation.review.models  # noqa: F401
