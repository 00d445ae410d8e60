#!/bin/sh
# Reads the request and answers with it, plus the environment it was given.
request=$(cat)
exec python3 -c '
import json, os, sys
request = json.loads(sys.argv[1])
payload = (request.get("event") or {}).get("payload") or {}
response = {"status": "ok", "result": {"request": request, "env": dict(os.environ)}}
if request.get("command") == "remember":
    response["state_updates"] = payload.get("state", {})
json.dump(response, sys.stdout)
' "$request"
