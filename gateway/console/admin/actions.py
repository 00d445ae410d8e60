"""The console's explicit actions (replay, cancel, retry now, reset a breaker, pause and resume a
schedule), offered the admin's two ways: as admin actions on a list (select rows, choose, confirm)
and as buttons on a record's own page (confirm). Each asks for confirmation, calls the same ledger
method as the CLI with the person as `admin:<username>`, and is written to the admin's own audit
trail (LogEntry: "Recent actions", each record's History, the Console actions list).

Permission is checked before anything is read or shown: a person whose role lacks the action's
permission gets 403 and nothing changes, however the request was made."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from django.contrib import messages
from django.contrib.admin.utils import quote, unquote
from django.db.models import Model, QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse

from gateway.config.errors import ConfigError
from gateway.console.admin.base import LedgerAdmin
from gateway.console.render import linkify
from gateway.operations import Actor, console_actor
from ledger.models import LostJob
from ledger.states import ActionRefused

# Rows one list action may change: a page's worth. Anything larger is the CLI's job.
MAX_SELECTED = 100


@dataclass(frozen=True)
class Action:
    name: str  # in URLs and the list's action menu: "replay"
    label: str  # the button: "Replay"
    permission: str  # "ledger.replay_job"
    explain: str  # what happens, on the confirmation page
    eligible: Callable[[Any], bool]
    refusal: str  # why a record that is not eligible is not: "only a finished job can be replayed"
    # Does it, as `actor`; returns what happened, for the person and the audit trail. Raises
    # ActionRefused or LostJob (someone else changed the record first) when it cannot.
    perform: Callable[[Any, Actor], str]
    danger: bool = False


class ActionsAdmin(LedgerAdmin):
    console_actions: Sequence[Action] = ()
    change_form_template = "admin/ductile/change_form.html"

    # -- the two ways in -------------------------------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        name = f"{self.opts.app_label}_{self.opts.model_name}_act"
        view = self.admin_site.admin_view(self.act_view)
        return [path("<path:object_id>/act/<str:action>/", view, name=name), *super().get_urls()]

    def act_view(self, request: HttpRequest, object_id: str, action: str) -> HttpResponse:
        """A record's button: GET asks for confirmation, POST with `confirm=yes` does it."""
        chosen = self._action(action)
        if not request.user.has_perm(chosen.permission):
            return self.refuse(request, chosen)
        obj = self.get_object(request, unquote(object_id))
        if obj is None:
            raise Http404(f"no {self.opts.verbose_name} {object_id!r}")
        if request.method == "POST" and request.POST.get("confirm") == "yes":
            self.perform(request, chosen, [obj])
            return HttpResponseRedirect(self._record_url(obj))
        return self.confirm(request, chosen, [obj], cancel_url=self._record_url(obj))

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        """The list's action menu: only what this person may do (never Django's bulk delete)."""
        if "_popup" in request.GET:
            return {}
        return {
            a.name: (self._list_action(a), a.name, f"{a.label} the selected {self.opts.verbose_name_plural}")
            for a in self.console_actions
            if request.user.has_perm(a.permission)
        }

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        # Why here and not only in get_actions: an action missing from the menu is silently ignored
        # by the admin (the list is shown again, 200); an action posted without permission is a 403.
        if request.method == "POST":
            for name in request.POST.getlist("action"):
                chosen = self._by_name().get(name)
                if chosen is not None and not request.user.has_perm(chosen.permission):
                    return self.refuse(request, chosen)
        return super().changelist_view(request, extra_context)

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        obj = self.get_object(request, unquote(object_id))
        buttons = [
            {"label": a.label, "url": self._act_url(obj, a), "danger": a.danger}
            for a in self.console_actions
            if obj is not None and request.user.has_perm(a.permission) and a.eligible(obj)
        ]
        return super().change_view(request, object_id, form_url, {**(extra_context or {}), "console_buttons": buttons})

    # -- confirming, doing, refusing -------------------------------------------------------------

    def confirm(
        self, request: HttpRequest, action: Action, objects: Sequence[Model], *, cancel_url: str, selected: bool = False
    ) -> TemplateResponse:
        rows: list[dict[str, Any]] = [
            {"object": obj, "url": self._record_url(obj), "eligible": action.eligible(obj)} for obj in objects
        ]
        context = {
            **self.admin_site.each_context(request),
            "title": f"{action.label}: are you sure?",
            "opts": self.opts,
            "action": action,
            "rows": rows,
            "eligible": sum(1 for r in rows if r["eligible"]),
            "cancel_url": cancel_url,
            # A list action posts back to the list with the same selection; a button to itself.
            "selected": [quote(obj.pk) for obj in objects] if selected else [],
        }
        return TemplateResponse(request, "admin/ductile/confirm_action.html", context)

    def perform(self, request: HttpRequest, action: Action, objects: Sequence[Model]) -> None:
        actor = console_actor(request.user.get_username())
        for obj in objects:
            before = str(obj)  # the record as the person chose it, not as the action left it
            if not action.eligible(obj):
                messages.warning(request, f"{before}: not done, {action.refusal}.")
                continue
            try:
                done = action.perform(obj, actor)
            except (ActionRefused, LostJob, ConfigError) as exc:
                messages.error(request, f"{before}: not done: {exc}")
                continue
            self.log_change(request, obj, f"{done} (by {actor})")
            messages.success(request, linkify(f"{before}: {done}."))

    def refuse(self, request: HttpRequest, action: Action) -> TemplateResponse:
        context = {
            **self.admin_site.each_context(request),
            "title": "Not allowed",
            "opts": self.opts,
            "action": action,
            "roles": sorted(request.user.groups.values_list("name", flat=True)),
        }
        return TemplateResponse(request, "admin/ductile/refused.html", context, status=403)

    # -- helpers ---------------------------------------------------------------------------------

    def _list_action(self, action: Action) -> Callable[[Any, HttpRequest, QuerySet[Any]], HttpResponse | None]:
        def run(modeladmin: Any, request: HttpRequest, queryset: QuerySet[Any]) -> HttpResponse | None:
            if not request.user.has_perm(action.permission):
                return self.refuse(request, action)
            objects = list(queryset[: MAX_SELECTED + 1])
            if len(objects) > MAX_SELECTED:
                messages.error(request, f"Select at most {MAX_SELECTED} rows for one action; nothing was done.")
                return None
            if request.POST.get("confirm") == "yes":
                self.perform(request, action, objects)
                return None
            return self.confirm(request, action, objects, cancel_url=request.get_full_path(), selected=True)

        return run

    def _by_name(self) -> dict[str, Action]:
        return {a.name: a for a in self.console_actions}

    def _action(self, name: str) -> Action:
        chosen = self._by_name().get(name)
        if chosen is None:
            raise Http404(f"no action {name!r} on {self.opts.verbose_name_plural}")
        return chosen

    def _record_url(self, obj: Model) -> str:
        return reverse(f"admin:{self.opts.app_label}_{self.opts.model_name}_change", args=[quote(obj.pk)])

    def _act_url(self, obj: Model, action: Action) -> str:
        name = f"admin:{self.opts.app_label}_{self.opts.model_name}_act"
        return reverse(name, args=[quote(obj.pk), action.name])
