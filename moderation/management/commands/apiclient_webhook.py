from django.core.management.base import CommandError

from moderation.delivery.endpoints import (
    EndpointRefused,
    client_endpoint_create,
    client_endpoint_delete,
    client_endpoints,
)
from moderation.delivery.models import SUBSCRIBABLE_EVENTS, ApiClient
from moderation.management.provisioning import ProvisioningCommand


class Command(ProvisioningCommand):
    help = (
        "An API client's own webhook endpoints, which receive only the events of the items that client submitted: "
        "add one (its signing secret is printed once), list them, or remove one."
    )

    def add_arguments(self, parser):
        actions = parser.add_subparsers(dest="action", required=True)
        add = actions.add_parser("add", help="register an endpoint; prints its signing secret, once")
        add.add_argument("client", help="the API client's name")
        add.add_argument("name", help="the endpoint's name, unique among the client's")
        add.add_argument("url", help="http(s) URL on a public address (or in WEBHOOK_ALLOWED_NETWORKS)")
        add.add_argument(
            "--event",
            action="append",
            dest="events",
            metavar="EVENT",
            help=f"repeat for several; default: all of {', '.join(SUBSCRIBABLE_EVENTS)}",
        )
        listing = actions.add_parser("list", help="the client's endpoints (never their secrets)")
        listing.add_argument("client")
        remove = actions.add_parser("remove", help="remove one of the client's endpoints, by id")
        remove.add_argument("client")
        remove.add_argument("id", type=int)

    def handle(self, *args, **options):
        client = ApiClient.objects.filter(name=options["client"]).first()
        if client is None:
            raise CommandError(f"no API client named {options['client']!r}")
        if options["action"] == "add":
            try:
                endpoint = client_endpoint_create(
                    client=client, name=options["name"], url=options["url"], events=options["events"]
                )
            except EndpointRefused as exc:
                raise CommandError(f"{exc.code}: {exc}; nothing changed") from None
            self.stderr.write(
                f"Endpoint {endpoint.pk} ({endpoint.name}) of {client.name} for "
                f"{', '.join(endpoint.events)}. Its signing secret, shown only now:"
            )
            self.stdout.write(endpoint.secret)
        elif options["action"] == "list":
            for endpoint in client_endpoints(client=client):
                state = "active" if endpoint.active else "inactive"
                self.stdout.write(f"{endpoint.pk}\t{endpoint.name}\t{endpoint.url}\t{','.join(endpoint.events)}\t{state}")
        elif not client_endpoint_delete(client=client, endpoint_id=options["id"]):
            raise CommandError(f"{client.name} has no webhook endpoint {options['id']}")
        else:
            self.stdout.write(f"Removed endpoint {options['id']} of {client.name}.")
