"""``python -m streamproc.runner``: one runner process (used by the crash tests and for
running a runner before ``streamproc runner`` is wired into the main command line)."""

from __future__ import annotations

import sys

from streamproc.runner.cli import main

if __name__ == "__main__":
    sys.exit(main())
