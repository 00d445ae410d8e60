"""Dates and times on the gateway's pages (the audit console) as the ledger and the API write them:
ISO 8601 order, 24-hour, to the second, in UTC (TIME_ZONE), instead of "Nov. 24, 2026, 8 p.m."."""

DATETIME_FORMAT = "Y-m-d H:i:s"
SHORT_DATETIME_FORMAT = "Y-m-d H:i"
DATE_FORMAT = "Y-m-d"
SHORT_DATE_FORMAT = "Y-m-d"
TIME_FORMAT = "H:i:s"
