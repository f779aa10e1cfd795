from django.apps import apps
from django.contrib import admin
from django.urls import include, path

from moderation.api.views import api

# settings.INSTALLED_APPS has the admin without autodiscovery: only a process that serves pages loads it.
admin.autodiscover()

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    path("api/v1/", api.urls),
    path("", include("moderation.urls")),
]
# The race lab (moderation.lab): only where its app is installed (reviewqueue.settings, REVIEWQUEUE_LAB).
if apps.is_installed("moderation.lab"):
    urlpatterns.append(path("lab/", include("moderation.lab.urls")))
