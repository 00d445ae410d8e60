"""Django's `jsonl` serialization format, with timestamps kept to the microsecond.

Django's JSON encoder cuts datetimes to milliseconds (ECMA-262 style); a ledger exported for a
backup and loaded back must hold exactly the times it held (job order, dedupe windows and the
times an operator reads all come from them). Installed as the project's `jsonl` format
(SERIALIZATION_MODULES in ductile_site/settings.py), so `dumpdata` and `loaddata` use it; the
reading side is Django's own, which parses microseconds already.
"""

from __future__ import annotations

import datetime
from typing import Any

from django.core.serializers import jsonl
from django.core.serializers.json import DjangoJSONEncoder

from ledger.timestamps import rfc3339


class MicrosecondEncoder(DjangoJSONEncoder):
    def default(self, o: Any) -> Any:
        if isinstance(o, datetime.datetime):
            # UTC (every time Django reads or writes) as the ledger writes it; any other as it is.
            return rfc3339(o) if o.utcoffset() == datetime.timedelta(0) else o.isoformat()
        return super().default(o)


class Serializer(jsonl.Serializer):
    def start_serialization(self) -> None:
        self.options.setdefault("cls", MicrosecondEncoder)
        super().start_serialization()


Deserializer = jsonl.Deserializer
