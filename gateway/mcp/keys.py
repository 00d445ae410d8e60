"""What the `/mcp` view (gateway/http/api/mcp.py) puts in the WSGI environ for the bridge
(gateway/mcp/web.py): plain names, so the view imports no more of the MCP stack than this until a
request asks for it."""

from __future__ import annotations

# The authenticated caller, in the WSGI environ a2wsgi hands to the SDK as `scope["wsgi_environ"]`.
CALLER_KEY = "ductile.mcp.caller"
# Set by the view when the request's answer may stay open (a listen stream, job.wait).
STREAMS_KEY = "ductile.mcp.streams"
# Under this key, for an answer that stays open, the view's `() -> bool`: whether it should end
# (the client closed its connection, gateway.http.api.syncgate.caller_gone, or the worker stops).
# An idle listen stream writes only the SDK's ping every 15 s; without looking, a client gone
# would hold its seat that long, and a stopping worker would wait for its stream.
GONE_KEY = "ductile.mcp.gone"
