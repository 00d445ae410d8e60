"""The live web views (ARCHITECTURE "Human surfaces"): `/dashboard/` (the gateway's figures, live)
and `/dashboard/pipelines/` (every pipeline as a Mermaid diagram, a chosen run coloured live), for
people logged in to the audit console with a role that may read the ledger."""
