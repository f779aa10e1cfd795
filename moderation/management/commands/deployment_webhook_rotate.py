from django.core.management.base import CommandError

from moderation.management.provisioning import ProvisioningCommand
from moderation.review.deployments import deployment_webhook_path, deployment_webhook_rotate


class Command(ProvisioningCommand):
    help = (
        "Give a deployment a new webhook secret (the old URL is refused from now on) and print its new webhook "
        "URL, once: for a URL that leaked, e.g. through LangGraph Server's logs."
    )

    def add_arguments(self, parser):
        parser.add_argument("name", help="the deployment's name (deployment_list)")
        parser.add_argument(
            "--base-url",
            default="http://127.0.0.1:8000",
            help="where the deployment reaches reviewqueue (for the printed webhook URL)",
        )

    def handle(self, *args, **options):
        rotated = deployment_webhook_rotate(name=options["name"])
        if rotated is None:
            raise CommandError(f"no deployment {options['name']!r}")
        deployment, secret = rotated
        self.stderr.write(
            f"New webhook secret for {deployment.name}; the old URL is refused from now on. "
            "Its webhook URL for the agent's runs (webhook=...), shown only now:"
        )
        self.stdout.write(options["base_url"].rstrip("/") + deployment_webhook_path(deployment=deployment, secret=secret))
