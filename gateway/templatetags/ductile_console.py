"""Template filters of the audit console's pages (gateway/console/admin/render.py does the work)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django import template
from django.utils.safestring import SafeString

from gateway.console import render
from ledger.models import Job

register = template.Library()


@register.filter
def thousands(value: int) -> str:
    """1234567 -> "1,234,567" (the admin's own counts are printed bare)."""
    return f"{int(value):,}"


@register.filter
def badge(value: str | None) -> SafeString:
    return render.badge(value)


@register.filter
def joblink(job_id: str | None) -> SafeString:
    return render.job_link(job_id)


@register.filter
def linkify(text: str) -> SafeString:
    return render.linkify(text or "")


@register.filter
def jsontree(value: Any) -> SafeString:
    return render.json_tree(value)


@register.filter
def ns(value: int | None) -> str:
    return render.nanoseconds(value)


@register.filter
def took(job: Job) -> str:
    return render.duration(job.started_at, job.completed_at)


@register.filter
def stamp(value: datetime | None) -> str:
    """UTC to the millisecond: transitions a few milliseconds apart still read in order."""
    if value is None:
        return "-"
    return value.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"
