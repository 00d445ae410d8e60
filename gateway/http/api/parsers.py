"""Request body parsing for the trigger endpoints."""

from __future__ import annotations

from collections.abc import Mapping
from typing import IO, Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser as DRFJSONParser

from ledger.storable import MAX_DEPTH


class JSONParser(DRFJSONParser):
    """DRF's parser, with a body nested past what the stack holds refused as the 400 it is (the
    intake refuses anything nested past ledger.storable.MAX_DEPTH)."""

    def parse(
        self, stream: IO[Any], media_type: str | None = None, parser_context: Mapping[str, Any] | None = None
    ) -> Any:
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError(f"JSON parse error - the body nests deeper than {MAX_DEPTH} levels") from None


class AnyContentTypeJSONParser(JSONParser):
    """A trigger's body is JSON whatever its Content-Type says, as the original gateway decodes it:
    `curl -d '{...}'` sends `application/x-www-form-urlencoded`, and some clients send no type at
    all. Listed after `JSONParser`, so `application/json` keeps its own entry in the OpenAPI
    document; a body that is not JSON is still a 400 that says where parsing stopped."""

    media_type = "*/*"


TRIGGER_PARSERS = [JSONParser, AnyContentTypeJSONParser]
