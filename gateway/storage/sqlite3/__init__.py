"""Django's SQLite backend, opening the gateway's ledger file the way the gateway wants it."""
