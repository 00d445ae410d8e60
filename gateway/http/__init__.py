"""The HTTP surface: the REST API, signed webhooks, the event stream and the live dashboard."""
