"""What every ledger table's page shares: read-only, and cheap on a big ledger. No full
`COUNT(*)` (healthchecks' habit): the paginator counts at most one row past what it can page
through, and the admin's own total and per-filter counts are off."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import admin
from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.functional import cached_property
from django.utils.safestring import SafeString

from ledger.console.render import badge, job_link, json_tree
from ledger.console.safety import Safe, safe_text

# Pages a list can reach (100 rows each); past them a person narrows the list with filters.
COUNT_CAP = 10_000


class CappedPaginator(Paginator):
    """Counts with `SELECT COUNT(*) FROM (… LIMIT cap + 1)`: the first pages of a million rows cost
    what the first pages of ten thousand do. `capped` says the real count is larger."""

    cap = COUNT_CAP

    @cached_property
    def count(self) -> int:
        object_list: Any = self.object_list
        return int(object_list[: self.cap + 1].count())

    @property
    def capped(self) -> bool:
        return self.count > self.cap


class LedgerAdmin(admin.ModelAdmin):
    """A ledger table: viewable by both roles; nothing added, edited or deleted here. Changes happen
    only through the explicit actions (ledger/admin/actions.py)."""

    paginator = CappedPaginator
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    list_per_page = 100
    actions: Any = []

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class JobIdSearch(LedgerAdmin):
    """A table of rows about jobs, searched by a whole job id through its `job_id` index (a
    `LIKE '%…%'` would read every row)."""

    search_fields = ("job_id",)
    search_help_text = "A whole job id."

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Any], search_term: str
    ) -> tuple[QuerySet[Any], bool]:
        term = search_term.strip().lower()
        return (queryset.filter(job_id=term) if term else queryset), False


# -- columns the tables share: each a ModelAdmin method, `name = job_column()` in a class body ----

Column = Callable[[Any, Any], Any]


def job_column(field: str = "job_id", description: str = "job") -> Column:
    """A job id as a link to that job's page."""

    @admin.display(description=description)
    def column(self: Any, row: Any) -> SafeString:
        return job_link(getattr(row, field))

    return column


def badge_column(field: str, description: str = "status") -> Column:
    @admin.display(description=description)
    def column(self: Any, row: Any) -> SafeString:
        return badge(getattr(row, field))

    return column


def target_column(ordering: str | None = None) -> Column:
    """`plugin.command`."""

    @admin.display(description="plugin.command", ordering=ordering)
    def column(self: Any, row: Any) -> str:
        return f"{row.plugin}.{row.command}"

    return column


def text_column(field: str, description: str) -> Column:
    """A stored text (an error, a reason) with the config's secrets scrubbed from it."""

    @admin.display(description=description)
    def column(self: Any, row: Any) -> str:
        return safe_text(getattr(row, field))

    return column


def json_column(field: str, description: str) -> Column:
    """Stored JSON, redacted, as a collapsible tree."""

    @admin.display(description=description)
    def column(self: Any, row: Any) -> SafeString:
        return json_tree(Safe.current().json(getattr(row, field)))

    return column
