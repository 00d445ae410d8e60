"""The console script's nouns: each one's summary (its command's `help`) and actions (its parser's
subcommands), read by `ductile --help` without loading a command, and which of them run on the
ledger's apps alone (`gateway.bootstrap.choose_settings`).

Why a table: loading the twelve command modules to ask each its `help` cost `ductile --help`
~0.4 s (each imports what its actions use), and agents call the CLI hundreds of times an hour.
The summaries live here only (each command's `help` is its entry); the actions are held to the
commands' own parsers by tests/gateway/cli/test_cli_surface.py. No Django here, nor `typing`
(~5 ms): the `--help` and `--version` paths import this module alone.
"""

from __future__ import annotations

# Every action of a noun runs on the ledger's apps (ductile_site/settings_worker.py).
EVERY_ACTION = "*"


class Noun:
    __slots__ = ("actions", "ledger_only", "summary")

    def __init__(self, summary: str, actions: tuple[str, ...], ledger_only: tuple[str, ...] = ()) -> None:
        self.summary = summary
        self.actions = actions
        # The actions that need nothing of the admin, the console's logins, DRF or django-q2: no
        # account, no backup of every app's tables, no housekeeping schedule, no migration graph
        # (gateway.storage.database.ensure_schema starts such a command again on every app when
        # the ledger is not current).
        self.ledger_only = ledger_only

    def runs_on_ledger_apps(self, action: str | None) -> bool:
        return EVERY_ACTION in self.ledger_only or action in self.ledger_only


NOUNS: dict[str, Noun] = {
    "admin": Noun(
        "Audit console accounts: create-user, list-users, disable-user, enable-user, remove-user, unlock.",
        ("create-user", "list-users", "disable-user", "enable-user", "remove-user", "unlock"),
    ),
    "api": Noun(
        "Call the local API: `api /jobs`, `api /plugin/echo/poll -f message=hello`, `api /system/reload -X POST`. "
        "Prints the response body; exit 0 on 2xx, 1 otherwise.",
        (),
        (EVERY_ACTION,),
    ),
    "config": Noun(
        "Config: `check`, `lock`, `show [ENTITY]`, `get PATH`, `set PATH=VALUE`, `snapshots [FINGERPRINT]`, "
        "`init [DIR]`, `token create|list|inspect|rehash|delete`, `scope add|remove|set|validate`, "
        "`plugin list|show|set`, `route list|add|remove`, `webhook list|add`, `backup`, `restore`, `schema`, "
        "`validate --file F`.",
        (
            *("check", "lock", "show", "get", "set", "snapshots", "init", "token", "scope", "plugin", "route"),
            *("webhook", "backup", "restore", "schema", "validate"),
        ),
        ("check", "show", "get", "snapshots", "schema", "validate"),
    ),
    "event": Noun("Events: `event publish TYPE --payload JSON`.", ("publish",), (EVERY_ACTION,)),
    "job": Noun(
        "Jobs: `job inspect ID`, `job logs`, `job replay ID`, `job cancel ID`, `job retry ID`.",
        ("inspect", "replay", "cancel", "retry", "logs"),
        (EVERY_ACTION,),
    ),
    "mcp": Noun(
        "MCP server on stdin/stdout for a local agent (`mcp [--token TOKEN]`); over HTTP it is the API's /mcp.",
        (),
        (EVERY_ACTION,),
    ),
    "pipeline": Noun(
        "Pipelines: `pipeline list`, `show NAME`, `visualize NAME`, `dry-run NAME`, `run NAME`.",
        ("list", "show", "visualize", "dry-run", "run"),
        (EVERY_ACTION,),
    ),
    "plugin": Noun(
        "Plugins: `plugin list [--api-url URL]`, `plugin manifest NAME`, `plugin run NAME`, "
        "`plugin lock NAME... | --all`.",
        ("list", "manifest", "run", "lock"),
        (EVERY_ACTION,),
    ),
    "relay": Noun("Remote event relay: `relay send INSTANCE --event TYPE --payload JSON`.", ("send",)),
    "schedule": Noun(
        "Schedules: `schedule pause PLUGIN[:ID]`, `schedule resume PLUGIN[:ID]`.", ("pause", "resume"), (EVERY_ACTION,)
    ),
    "skills": Noun(
        "Export the capability registry for LLMs: every plugin command (endpoint, scopes, input schema, "
        "mutates_state, idempotent, retry_safe) and pipeline (trigger, mode, steps), as Markdown.",
        (),
        (EVERY_ACTION,),
    ),
    "stopwatch": Noun(
        "Stopwatch: `stopwatch prune --older-than DUR [--plugin P] [--step S] [--status ST] [--dry-run]`.",
        ("prune",),
        (EVERY_ACTION,),
    ),
    "system": Noun(
        "System: `status`, `start`, `reload`, `doctor`, `selfcheck`, `watch`, `scheduler`, `breaker [PLUGIN]`, "
        "`reset PLUGIN`, `plugin-facts PLUGIN`, `backup`, `restore`, `migrate-ledger --to URL`.",
        (
            *("status", "breaker", "start", "scheduler", "reset", "backup", "restore", "plugin-facts", "selfcheck"),
            *("reload", "doctor", "watch", "migrate-ledger"),
        ),
        ("status", "breaker", "scheduler", "reset", "plugin-facts", "watch"),
    ),
}
