"""The webhook listener (spec 000 §10, "Webhooks"): gateway/config/webhooks.py types and validates
`webhooks:` at config load; `signatures` checks HMAC-SHA256; `delivery` turns an accepted body into
a queued job; `views` and `urls` are the HTTP surface a second gunicorn serves on `webhooks.listen`."""
