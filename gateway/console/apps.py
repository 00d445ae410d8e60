from __future__ import annotations

from axes import apps as axes_apps
from django.contrib.admin import apps as admin_apps


class ConsoleAdminConfig(admin_apps.AdminConfig):
    """django.contrib.admin with the audit console site (gateway/console/site.py) as `admin.site`.
    Named in full in INSTALLED_APPS, in place of `django.contrib.admin`."""

    default_site = "gateway.console.site.ConsoleSite"


class LoginsConfig(axes_apps.AppConfig):
    """django-axes (failed logins, lockouts, logins), headed "Logins" in the console. Named in full in
    INSTALLED_APPS, in place of `axes`; its label stays `axes`."""

    verbose_name = "Logins"
