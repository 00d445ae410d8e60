"""Request body parsing for the trigger endpoints."""

from __future__ import annotations

from rest_framework.parsers import JSONParser


class AnyContentTypeJSONParser(JSONParser):
    """A trigger's body is JSON whatever its Content-Type says, as the original gateway decodes it:
    `curl -d '{...}'` sends `application/x-www-form-urlencoded`, and some clients send no type at
    all. Listed after `JSONParser`, so `application/json` keeps its own entry in the OpenAPI
    document; a body that is not JSON is still a 400 that says where parsing stopped."""

    media_type = "*/*"


TRIGGER_PARSERS = [JSONParser, AnyContentTypeJSONParser]
