from moderation.management.provisioning import ProvisioningCommand
from moderation.review.models import Deployment


class Command(ProvisioningCommand):
    help = "List the connected LangGraph deployments (never their API keys or webhook secrets)."

    def handle(self, *args, **options):
        for d in Deployment.objects.order_by("name"):
            graphs = ", ".join(f"{g}→{r.get('team') or 'any team'}" for g, r in d.graphs.items())
            state = "active" if d.is_active else "inactive"
            swept = d.swept_at.isoformat(timespec="seconds") if d.swept_at else "never"
            key = "key set" if d.api_key else "no key"
            self.stdout.write(
                f"{d.name}\t{d.url}\t{state}\t{key}\tgraphs: {graphs}\tswept: {swept}"
                + (f"\tsweep error: {d.sweep_error}" if d.sweep_error else "")
            )
