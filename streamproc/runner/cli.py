"""``streamproc runner``: run the runner role (segments → scanner → verdicts → Notify).

Registered by :mod:`streamproc.cli` with ``runner_cli.register(sub, _common)``; it takes the
process options every role process has (:mod:`streamproc.role_cli`). Any number of runners
share the work queue's durable consumers.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from streamproc.cliargs import common as _common
from streamproc.configfile.loader import activate
from streamproc.role_cli import add_process_options, process_settings, serve
from streamproc.runner.role import make_runner
from streamproc.runner.settings import configured as configured_runner


def register(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
    common: Callable[[argparse.ArgumentParser], None],
) -> None:
    p = subparsers.add_parser(
        "runner", help="run the runner role: take segments, call the scanner, record verdicts"
    )
    add_process_options(p, common, "runner")
    p.add_argument("--scanner-url", help="scanner base URL (STREAMPROC_SCANNER_URL)")
    p.add_argument("--workers", type=int, help="segments processed at once (default 2)")
    p.add_argument("--inflight", type=int, help="scanner calls in flight per segment (8)")
    p.set_defaults(fn=cmd_runner)


def cmd_runner(args: argparse.Namespace) -> int:
    settings = process_settings(args, "runner")
    runner = configured_runner(
        settings.configuration,
        {"scanner_url": args.scanner_url, "workers": args.workers, "inflight": args.inflight},
    )
    # ``python -m streamproc.runner`` keeps its old contract: HTTP only with --http-port.
    http = args.http_port is not None if getattr(args, "http_opt_in", False) else True
    return serve(settings, "runner", http=http, spec=make_runner(runner))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="streamproc")
    sub = parser.add_subparsers(dest="command", required=True)
    register(sub, _common)
    args = parser.parse_args(
        ["runner", *(argv if argv is not None else __import__("sys").argv[1:])]
    )
    args.http_opt_in = True

    args.configuration = activate(getattr(args, "config", None))  # as `streamproc runner` does
    return int(args.fn(args))
