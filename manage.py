#!/usr/bin/env python3
"""Django's command-line utility; the same commands as the `ductile` console script."""

from __future__ import annotations

import sys

if __name__ == "__main__":
    from gateway.cli.main import main

    sys.exit(main(sys.argv))
