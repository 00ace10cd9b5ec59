"""``python -m streamproc.scanner [options]``: the reference scanner (same as
``streamproc scanner``), e.g. as a separate process for benchmarks."""

from __future__ import annotations

import sys

from streamproc.cli import main

if __name__ == "__main__":
    sys.exit(main(["scanner", *sys.argv[1:]]))
