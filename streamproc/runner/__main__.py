"""``python -m streamproc.runner``: one runner process, as ``streamproc runner`` but serving
HTTP only when ``--http-port`` is given (the crash tests start several on one machine)."""

from __future__ import annotations

import sys

from streamproc.runner.cli import main

if __name__ == "__main__":
    sys.exit(main())
