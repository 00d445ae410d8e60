"""`api PATH [-X METHOD] [-f key=value ...] [-H 'Name: value' ...] [-b BODY]`: call the gateway's
HTTP API with the configured token and print the answer's body (gateway/cli/api_call.py says where
the URL and the token come from). Exit 0 on a 2xx answer, 1 on any other answer or when the API
cannot be reached, 2 on a usage error."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from django.core.management.base import CommandParser

from gateway.cli.api_call import ApiAnswer, UsageError, base_url, build_call, config_token, env_token, send
from gateway.cli.base import EXIT_FAILED, EXIT_USAGE, DuctileCommand, Exit
from gateway.cli.nouns import NOUNS


class Command(DuctileCommand):
    help = NOUNS["api"].summary

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", help="API path, e.g. /jobs or /plugin/echo/poll")
        parser.add_argument(
            "-X", "--method", help="HTTP method (default: POST with -b, or with -f on /plugin and /pipeline; else GET)"
        )
        parser.add_argument(
            "-f",
            "--field",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help='a field: {"payload": {KEY: VALUE}} on /plugin and /pipeline (POST), the query string on a GET',
        )
        parser.add_argument("-H", "--header", action="append", default=[], metavar="'NAME: VALUE'")
        parser.add_argument("-b", "--body", help="the request body as is (JSON); @FILE reads it from FILE")
        parser.add_argument("--api-url", help="default: http://<api.listen> of the running gateway, else of the config")
        parser.add_argument(
            "--api-key",
            help="bearer token (default: $DUCTILE_API_KEY, $DUCTILE_TOKEN, else the running gateway's or the config's "
            "`*` token)",
        )
        parser.add_argument("--timeout", type=float, default=330.0, help="seconds to wait for the answer")
        parser.add_argument("--dry-run", action="store_true", help="show the request (token hidden); send nothing")
        self.add_json(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        body = options["body"]
        if body is not None and body.startswith("@"):
            try:
                with open(body[1:], encoding="utf-8") as handle:
                    body = handle.read()
            except OSError as exc:
                raise Exit(EXIT_USAGE, f"-b {body}: {exc.strerror}") from exc
        token = options["api_key"] or env_token(os.environ)
        base = options["api_url"]
        if base is None or token is None:
            runtime = self.gateway_runtime()  # only when the config must say: an invalid one exits 78
            base = base or base_url(runtime)
            token = token or config_token(runtime)
        try:
            call = build_call(
                options["path"],
                base=base,
                token=token,
                method=options["method"],
                fields=options["field"],
                headers=options["header"],
                body=body,
            )
        except UsageError as exc:
            raise Exit(EXIT_USAGE, str(exc)) from exc
        if options["dry_run"]:
            shown = call.shown()
            self.emit({"dry_run": True, "request": shown}, lambda: json.dumps(shown, indent=2))
            return
        if options["verbosity"]:
            self.stderr.write(f"{call.method} {call.url}" + ("" if token else " (no token)"))
        try:
            answer = send(call, timeout=options["timeout"], stream_to=None if self.as_json else self.stdout)
        except OSError as exc:
            raise Exit(EXIT_FAILED, f"cannot reach the API at {base}: {exc} (is `system start` running?)") from exc
        self._print(answer)
        if not answer.ok:
            sys.exit(EXIT_FAILED)

    def _print(self, answer: ApiAnswer) -> None:
        body = answer.parsed()
        if self.as_json:
            self.stdout.write(json.dumps({"status": answer.status, "body": body}, indent=2))
            return
        if answer.body:
            self.stdout.write(json.dumps(body, indent=2) if not isinstance(body, str) else body.rstrip("\n"))
        if not answer.ok:
            self.stderr.write(f"error: HTTP {answer.status} {answer.reason}")
