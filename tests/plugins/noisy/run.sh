#!/bin/sh
# Talks on stderr the way a careless plugin does (its whole request, secrets and all), emits one
# event, records a snapshot, and answers ok, or an error when payload.fail is set.
exec python3 -c '
import json, sys
request = json.load(sys.stdin)
payload = (request.get("event") or {}).get("payload") or {}
config = request.get("config") or {}
sys.stderr.write("noisy: starting with config %s\n" % json.dumps(config))
sys.stderr.write("noisy: payload %s\n" % json.dumps(payload))
if payload.get("fail"):
    json.dump({"status": "error", "error": "noisy failed on purpose (key %s)" % config.get("api_key")}, sys.stdout)
    sys.exit(0)
json.dump({
    "status": "ok",
    "result": "noisy done",
    "events": [{"type": "noisy.said", "payload": {"words": payload.get("words", "hello"), "api_token": "from-the-event-111111"}}],
    "state_updates": {"seen": payload.get("words", "hello")},
    "logs": [{"level": "info", "message": "noisy done"}],
}, sys.stdout)
'
