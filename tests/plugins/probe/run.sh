#!/bin/sh
# Answers with the request it received and the environment it was given.
exec python3 -c '
import json, os, sys
request = json.load(sys.stdin)
payload = (request.get("event") or {}).get("payload") or {}
response = {"status": "ok", "result": {"request": request, "env": dict(os.environ)}}
if request.get("command") == "remember":
    response["state_updates"] = payload.get("state", {})
json.dump(response, sys.stdout)
'
