#!/usr/bin/env python3
"""Django's command-line utility: the `ductile` console script's commands and all of Django's own
(the gateway's daemons are started through it)."""

from __future__ import annotations

import sys

if __name__ == "__main__":
    from gateway.cli.main import main

    sys.exit(main(sys.argv, whole_django=True))
