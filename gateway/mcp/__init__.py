"""The gateway as an MCP server: its catalogue of tools and resources per caller (catalogue.py),
what each does on the intake and the read models (calls.py), the SDK's server over both
transports (server.py), stdio for `ductile mcp` (stdio.py) and the WSGI bridge for the API's
`/mcp` (web.py). docs/mcp.md is the user's side."""
