"""What every ledger table's page shares: read-only, and cheap on a big ledger. Nothing is
counted (healthchecks' habit, taken further): a list reads its page's rows and one more, which
says whether a next page exists, so the first pages of a million rows, filtered any way, cost
what they cost on a small ledger."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import ChangeList
from django.core.paginator import EmptyPage, InvalidPage, Page, Paginator
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.functional import cached_property
from django.utils.safestring import SafeString

from gateway.console.render import badge, job_link, json_tree
from gateway.console.safety import Safe, safe_text

# The largest row offset SQLite and PostgreSQL take (a signed 64-bit integer): a page past it
# cannot be asked for, and has no rows anyway.
MAX_OFFSET = 2**63 - 1


class PeekPaginator(Paginator):
    """One page of a list without a `COUNT(*)`: page `number`'s rows plus one. `count` is the rows
    up to the end of this page (plus one when there is more), which is all the admin's page links
    need; `has_more` says whether the real count is larger."""

    def __init__(self, object_list: Any, per_page: int, *, number: int) -> None:
        super().__init__(object_list, per_page)
        self.number = number

    @cached_property
    def rows(self) -> list[Any]:
        first = (self.number - 1) * self.per_page
        return list(self.object_list[first : first + self.per_page + 1])

    @cached_property
    def count(self) -> int:
        return (self.number - 1) * self.per_page + len(self.rows)

    @property
    def has_more(self) -> bool:
        return len(self.rows) > self.per_page

    @property
    def first_row(self) -> int:
        return (self.number - 1) * self.per_page + 1

    @property
    def last_row(self) -> int:
        return (self.number - 1) * self.per_page + len(self.rows[: self.per_page])

    def page(self, number: Any) -> Page:
        # Checked before the rows are read: the database refuses an offset past its integer range
        # (a 500), and Django a negative one. The admin answers an empty page by showing page 1.
        if self.number < 1 or self.number * (self.per_page + 1) > MAX_OFFSET:
            raise EmptyPage(f"there is no page {self.number}")
        if self.validate_number(number) != self.number:
            raise InvalidPage(f"this paginator reads page {self.number} only")
        return Page(self.rows[: self.per_page], self.number, self)


class LedgerChangeList(ChangeList):
    """The admin's list with a `PeekPaginator`: no total, no per-filter count, no "show all"."""

    def get_results(self, request: HttpRequest) -> None:
        paginator = PeekPaginator(self.queryset, self.list_per_page, number=self.page_num)
        try:
            page = paginator.page(self.page_num)
        except InvalidPage as exc:
            raise IncorrectLookupParameters from exc
        self.paginator = paginator
        self.result_list = page.object_list
        self.result_count = paginator.count
        self.full_result_count = None
        self.show_full_result_count = False
        self.show_admin_actions = True
        self.can_show_all = False
        self.multi_page = paginator.num_pages > 1


class LedgerAdmin(admin.ModelAdmin):
    """A ledger table: viewable by both roles; nothing added, edited or deleted here. Changes happen
    only through the explicit actions (gateway/console/admin/actions.py)."""

    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    list_per_page = 100
    actions: Any = []

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return LedgerChangeList

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
