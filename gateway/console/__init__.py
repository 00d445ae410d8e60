"""The audit console's pages and helpers that register nothing: its admin site (the index's
summary, the config page), the job list's filters, one job's story, redaction and rendering.
Kept apart from gateway/console/admin/, whose import registers the ledger's tables with the site: the
default admin site is built lazily from gateway.console.site, which must not trigger that."""
