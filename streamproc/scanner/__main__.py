"""``python -m streamproc.scanner [options]``: the reference scanner (same as
``streamproc scanner``), e.g. as a separate process for benchmarks."""

from __future__ import annotations

import argparse
import sys

from streamproc.scanner.cli import register


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m streamproc.scanner")
    sub = parser.add_subparsers(dest="command", required=True)
    register(sub, lambda p: None)
    args = parser.parse_args(["scanner", *(sys.argv[1:] if argv is None else argv)])
    return int(args.fn(args))


if __name__ == "__main__":
    sys.exit(main())
