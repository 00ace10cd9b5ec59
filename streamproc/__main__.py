"""The ``streamproc`` command (its console script) and ``python -m streamproc``.

The command line imports every role before it reads a word of the command, which takes a
few seconds; a Ctrl-C in those seconds interrupted the import and printed its traceback.
Here nothing is imported yet, so the interruption ends the command the way a Ctrl-C later
does: no traceback, exit code 130."""

from __future__ import annotations

import sys

from streamproc import exitcodes


def main() -> int:
    try:
        from streamproc.cli import main as command  # deferred: a Ctrl-C during it is caught
    except KeyboardInterrupt:
        return exitcodes.INTERRUPTED
    return command()


if __name__ == "__main__":
    sys.exit(main())
