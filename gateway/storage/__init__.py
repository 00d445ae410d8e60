"""Opening the ledger's database (migrations on first start, refusal of a corrupted or newer file,
the SQLite backend that keeps the state directory private) and the wake-ups that carry its
commits to other processes."""
