from django.urls import path

from moderation.web import decided_views, metrics_views, team_views, views

app_name = "moderation"

urlpatterns = [
    path("", views.queue, name="queue"),
    path("next/", views.next_item, name="next"),
    path("bulk/", views.bulk_decide, name="bulk"),
    path("items/<str:public_id>/", views.item_detail, name="item"),
    path("items/<str:public_id>/history", decided_views.item_history, name="item-history"),
    path("decided/", decided_views.decided, name="decided"),
    path("decided/export.csv", decided_views.decided_export, name="decided-export"),
    path("items/<str:public_id>/claim", views.item_claim, name="item-claim"),
    path("api/items/<str:public_id>/decision", views.api_decide, name="api-decide"),
    path("api/items/<uuid:public_id>/state", views.live_state, name="api-item-state"),
    path("api/live/state", views.live_state, name="api-queue-state"),
    path("healthz", views.healthz, name="healthz"),
    path("readyz", views.readyz, name="readyz"),
    path("metrics", metrics_views.metrics, name="metrics"),
    path("team/", team_views.team, name="team"),
    path("team/export.csv", team_views.team_export, name="team-export"),
]
