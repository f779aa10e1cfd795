from django.urls import path

from moderation.lab import views

app_name = "lab"

urlpatterns = [
    path("", views.lab, name="page"),
    path("status", views.lab_status_json, name="status"),
    path("run", views.lab_run_start, name="run"),
    path("chart.svg", views.lab_chart, name="chart"),
]
