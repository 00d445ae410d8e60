"""`relay send INSTANCE --event TYPE`: deliver one event to a named remote gateway of
relay-instances.yaml, signed as this gateway's `service.name` (spec 000 "Remote Event Relay", the
CLI example). Exit 0 once the receiver accepted it (202), 1 when it did not, with why."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import CommandParser

from gateway.cli.base import EXIT_FAILED, EXIT_USAGE, DuctileCommand, Exit, json_object
from gateway.cli.nouns import NOUNS
from gateway.relay.sender import RelayFailed, prepare, send
from gateway.relay.wire import Envelope
from pipelines.relay_step import EVENT_TYPE


class Command(DuctileCommand):
    help = NOUNS["relay"].summary

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        send_ = actions.add_parser("send", help="send one event to a relay instance; exit 0 once it is accepted")
        send_.add_argument("instance", help="an instance of relay-instances.yaml")
        send_.add_argument("--event", required=True, help="the remote event type, e.g. backup.ready")
        send_.add_argument("--payload", help="the event payload, a JSON object")
        send_.add_argument("--dedupe-key", help="the receiver deduplicates on it (a retry sends the same)")
        send_.add_argument("--baggage", help="a JSON object; the receiver keeps the keys its peer policy allows")
        send_.add_argument("--origin-plugin", default="", help="recorded as the event's origin")
        send_.add_argument("--origin-job-id", default="", help="recorded as the event's origin")
        send_.add_argument("--origin-event-id", default="", help="recorded; without --dedupe-key, it deduplicates")
        send_.add_argument(
            "--dry-run", action="store_true", help="check and sign the event, show what would be sent, send nothing"
        )
        self.add_json(send_)

    def handle(self, *args: Any, **options: Any) -> None:
        if not EVENT_TYPE.fullmatch(options["event"]):
            raise Exit(EXIT_USAGE, f"--event {options['event']!r} must be lower-case dotted, such as backup.ready")
        runtime = self.runtime()
        name = runtime.config.service.name
        envelope = Envelope(
            options["event"],
            json_object(options["payload"], "--payload") or {},
            options["dedupe_key"] or None,
            {
                "instance": name,
                "plugin": options["origin_plugin"],
                "job_id": options["origin_job_id"],
                "event_id": options["origin_event_id"],
            },
            json_object(options["baggage"], "--baggage") or {},
        )
        if options["dry_run"]:
            self.dry_run(runtime.relay, name, options["instance"], envelope)
            return
        try:
            accepted = send(runtime.relay, name, options["instance"], envelope)
        except RelayFailed as exc:
            raise Exit(EXIT_FAILED, f"not relayed: {exc}", {"retryable": exc.retryable, "status": exc.status}) from exc
        data = {"instance": options["instance"], **accepted.as_dict()}
        job = f", its job {accepted.job_id}" if accepted.job_id else ", no local pipeline matched it there"
        self.emit(data, f"accepted by {options['instance']} as event {accepted.receiver_event_id}{job}")

    def dry_run(self, relay: Any, name: str, instance: str, envelope: Envelope) -> None:
        try:
            delivery = prepare(relay, name, instance, envelope)
        except RelayFailed as exc:
            raise Exit(EXIT_FAILED, f"would not be relayed: {exc}", {"retryable": exc.retryable}) from exc
        data = {
            "dry_run": True,
            "instance": instance,
            "url": delivery.url,
            "headers": {k: v for k, v in delivery.headers.items() if k != "Content-Type"},
            "body": json.loads(delivery.body),
        }
        self.emit(data, f"would POST {len(delivery.body)} bytes to {delivery.url}, signed as {name}; nothing sent")
