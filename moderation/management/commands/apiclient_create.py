from django.core.exceptions import ValidationError
from django.core.management.base import CommandError

from moderation.api.clients import apiclient_create
from moderation.delivery.models import ApiScope
from moderation.management.provisioning import ProvisioningCommand


class Command(ProvisioningCommand):
    help = "Create an API client (a service account for /api/v1) and print its first token, once."

    def add_arguments(self, parser):
        parser.add_argument("name")
        parser.add_argument(
            "--scope",
            action="append",
            choices=ApiScope.values,
            dest="scopes",
            help="repeat for several; default: items:write and items:read",
        )

    def handle(self, *args, **options):
        scopes = options["scopes"] or list(ApiScope.values)
        try:
            client, token = apiclient_create(name=options["name"], scopes=scopes)
        except ValidationError as exc:
            raise CommandError("; ".join(f"{f}: {' '.join(m)}" for f, m in exc.message_dict.items())) from None
        self.stderr.write(f"API client {client.name} ({', '.join(client.scopes)}). Its token, shown only now:")
        self.stdout.write(token)
