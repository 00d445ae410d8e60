"""Test helpers, one module per kind: `config_dirs` (config directories), `runtime` (a config's
runtime installed in-process), `jobs` (running jobs in-process and reading what they recorded),
`processes` (gateway processes and the ledger they use), `waiting` (`wait_for`), `network` (free
ports, loopback HTTP servers), `checkout` (REPO, fresh clones), and the surfaces' own helpers
(`browser`, `live_api`, `webhooks`, `outages`, `console_setup`, `output`)."""
