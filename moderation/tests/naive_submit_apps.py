import uuid

from moderation.apps import ModerationConfig


class NaiveSubmitConfig(ModerationConfig):
    def ready(self) -> None:
        super().ready()
        from moderation.review import submissions

        submissions._public_id_for = lambda **kwargs: uuid.uuid4()
