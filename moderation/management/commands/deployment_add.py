import json
import os

from django.core.management.base import BaseCommand, CommandError

from moderation.review.deployments import DeploymentInvalid, GraphRoute, deployment_register, deployment_webhook_path


class Command(BaseCommand):
    help = (
        "Connect a LangGraph Server deployment: its interrupted threads become items. Checks the URL, the key "
        "and the graphs with the deployment first (nothing is created if any is wrong); prints the webhook URL "
        "for the agent's runs, once."
    )

    def add_arguments(self, parser):
        parser.add_argument("name", help="a short name (letters, digits, - and _)")
        parser.add_argument("--url", required=True, help="the deployment's URL, e.g. http://127.0.0.1:2024")
        parser.add_argument(
            "--api-key-env",
            default="",
            metavar="VARIABLE",
            help="the environment variable holding its API key (never passed on the command line)",
        )
        parser.add_argument(
            "--graph",
            action="append",
            required=True,
            dest="graphs",
            metavar="GRAPH[=TEAM]",
            help="a graph id or assistant id to review, optionally with the team that decides it; repeat for several",
        )
        parser.add_argument("--policy", default="", help="the approval policy of its items, as JSON")
        parser.add_argument(
            "--base-url",
            default="http://127.0.0.1:8000",
            help="where the deployment reaches reviewqueue (for the printed webhook URL)",
        )

    def handle(self, *args, **options):
        api_key = ""
        if options["api_key_env"]:
            api_key = os.environ.get(options["api_key_env"], "")
            if not api_key:
                raise CommandError(f"--api-key-env: {options['api_key_env']} is not set")
        try:
            policy = json.loads(options["policy"]) if options["policy"] else None
        except ValueError:
            raise CommandError("--policy: not JSON") from None
        routes = []
        for spec in options["graphs"]:
            graph, _, team = spec.partition("=")
            routes.append(GraphRoute(graph=graph, team=team or None, policy=policy))
        try:
            deployment, secret = deployment_register(name=options["name"], url=options["url"], api_key=api_key, routes=routes)
        except DeploymentInvalid as exc:
            raise CommandError(str(exc)) from None
        self.stderr.write(
            f"Connected {deployment.name} ({deployment.url}): graphs {', '.join(deployment.graphs)}. "
            "Its webhook URL for the agent's runs (webhook=...), shown only now:"
        )
        self.stdout.write(options["base_url"].rstrip("/") + deployment_webhook_path(deployment=deployment, secret=secret))
