"""`system backup` and `system restore` (spec "Deployment Guide" §10, "Operator Handbook" Backup).

An archive is a tar.gz holding, in this order:

* `BACKUP_MANIFEST.txt`: YAML, what the archive holds and where each part came from (manifest.py);
* `db/ductile.sqlite` (a SQLite `VACUUM INTO` snapshot) or `db/ledger.jsonl` (a PostgreSQL
  export taken in one REPEATABLE READ transaction), see snapshot.py;
* `config/…`: the config directory, at scope config and above;
* `plugins/NN-name/…`: every plugin root, at scope plugins and above;
* `env/NN-name`: `environment_vars.include` files outside the config directory, at scope all
  (those inside it are under `config/`).

What each scope takes and leaves out, and why, is decided in scope.py; restore.py puts an
archive back as a runnable instance in a fresh directory.
"""
