from moderation.apps import ModerationConfig


class NaiveWebhookConfig(ModerationConfig):
    def ready(self) -> None:
        super().ready()
        from moderation.api import views

        views.deployment_webhook = _discovered_in_the_request


def _discovered_in_the_request(*, deployment, payload) -> str:
    from moderation.graphs.remote import remote_thread_read
    from moderation.review.deployments import thread_discover
    from moderation.review.remote import deployment_connection

    thread = remote_thread_read(connection=deployment_connection(deployment), thread_id=payload["thread_id"])
    thread_discover(deployment=deployment, thread=thread)
    return thread.thread_id
