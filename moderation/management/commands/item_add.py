from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from moderation.items import item_create


class Command(BaseCommand):
    help = "Add an item to the review queue and start its graph."

    def add_arguments(self, parser):
        parser.add_argument("--title", required=True)
        parser.add_argument("--body", required=True)
        parser.add_argument("--source", default="cli")

    def handle(self, *args, **options):
        try:
            item = item_create(title=options["title"], body=options["body"], source=options["source"])
        except ValidationError as exc:
            raise CommandError("; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items())) from None
        flags = ", ".join(item.review_request.get("flags", [])) or "none"
        self.stdout.write(f"Added {item.public_id} (risk {item.review_request.get('risk')}, flags: {flags})")
