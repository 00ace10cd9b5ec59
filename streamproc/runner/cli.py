"""``streamproc runner``: run the runner role (segments → scanner → verdicts → Notify).

Registered by :mod:`streamproc.cli` with ``runner_cli.register(sub, _common)``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from streamproc.config import load


def register(
    subparsers: argparse._SubParsersAction,  # type: ignore[type-arg]
    common: Callable[[argparse.ArgumentParser], None],
) -> None:
    p = subparsers.add_parser(
        "runner", help="run the runner role: take segments, call the scanner, record verdicts"
    )
    common(p)
    p.add_argument("--scanner-url", help="scanner base URL (STREAMPROC_SCANNER_URL)")
    p.add_argument("--workers", type=int, help="segments processed at once (default 2)")
    p.add_argument("--inflight", type=int, help="scanner calls in flight per segment (8)")
    p.add_argument("--http-port", type=int, help="serve /healthz, /readyz, /metrics here")
    p.set_defaults(fn=cmd_runner)


def cmd_runner(args: argparse.Namespace) -> int:
    import uvloop

    from streamproc import roles
    from streamproc.app import run_roles
    from streamproc.runner.role import make_runner
    from streamproc.runner.settings import load as load_runner

    settings = load(
        {
            "data_dir": getattr(args, "data_dir", None),
            "nats_url": getattr(args, "nats_url", None),
            "prefix": getattr(args, "prefix", None),
            "node_id": getattr(args, "node_id", None),
            "http_port": getattr(args, "http_port", None),
        }
    )
    runner = load_runner(
        {"scanner_url": args.scanner_url, "workers": args.workers, "inflight": args.inflight}
    )
    roles.ROLES["runner"] = make_runner(runner)
    return int(uvloop.run(run_roles(settings, ["runner"], http=args.http_port is not None)))


def main(argv: list[str] | None = None) -> int:
    from streamproc.cli import _common

    parser = argparse.ArgumentParser(prog="streamproc")
    sub = parser.add_subparsers(dest="command", required=True)
    register(sub, _common)
    args = parser.parse_args(
        ["runner", *(argv if argv is not None else __import__("sys").argv[1:])]
    )
    return int(args.fn(args))
