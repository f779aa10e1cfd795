from django.contrib import admin
from django.urls import include, path

from moderation.api.views import api

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    path("api/v1/", api.urls),
    path("", include("moderation.urls")),
]
