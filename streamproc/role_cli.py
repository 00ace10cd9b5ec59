"""``streamproc gateway|planner|auditor`` — and the process options ``streamproc runner``
shares: one role per process, against a NATS server that is already running.

Each process connects to ``--nats-url`` (``NATS_URL``, default ``nats://127.0.0.1:4222``;
never an embedded server), keeps its state under ``--data-dir`` (locked while it runs) and
serves ``/healthz``, ``/readyz`` and ``/metrics`` on ``--http-host`` (127.0.0.1) and a port of
its own, so the four fit on one machine. The gateway serves its API there instead of
``/metrics``, which it serves only on its ops listener (``--ops-port``).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable

import msgspec

from streamproc import exitcodes
from streamproc.cliargs import OPS_PORT_HELP
from streamproc.cliargs import settings as cli_settings
from streamproc.config import ENV, Settings
from streamproc.natsd.session import run
from streamproc.roles import run_roles
from streamproc.runtime.reactor import RoleSpec

DEFAULT_NATS_URL = "nats://127.0.0.1:4222"
DEFAULT_PORTS = {
    "gateway": 8480,
    "planner": 8481,
    "runner": 8482,
    "auditor": 8483,
    "feeds": 8485,
}
HELP = {
    "gateway": "run the gateway: REST API and webhooks over its own read model",
    "planner": "run the planner (one active, others standby): exports and cron become runs",
    "auditor": "run the auditor (one active, others standby): audit chains, signed snapshots",
    "feeds": "run the feeds role (one active, others standby): an OSV directory watched, its "
    "changes recorded as Feedser exports",
}

Common = Callable[[argparse.ArgumentParser], None]


def http_port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port}: a port is between 1 and 65535")
    return port


def add_process_options(p: argparse.ArgumentParser, common: Common, role: str) -> None:
    common(p)
    p.add_argument("--http-host", help="address to serve HTTP on (default 127.0.0.1)")
    p.add_argument(
        "--http-port",
        type=http_port,
        help=f"HTTP port (default {DEFAULT_PORTS[role]}, or STREAMPROC_HTTP_PORT)",
    )
    if role == "gateway":
        p.add_argument("--ops-port", type=http_port, help=OPS_PORT_HELP)


def process_settings(args: argparse.Namespace, role: str) -> Settings:
    """The shared settings, with a role process's defaults: a NATS URL (never the embedded
    server) and the role's own HTTP port unless one was configured."""
    s = cli_settings(args)
    changes: dict[str, object] = {}
    if not s.nats_url:
        changes["nats_url"] = DEFAULT_NATS_URL
    if getattr(args, "http_port", None) is None and not s.configuration.get(ENV["http_port"]):
        changes["http_port"] = DEFAULT_PORTS[role]
    if getattr(args, "http_host", None):
        changes["http_host"] = args.http_host
    return msgspec.structs.replace(s, **changes) if changes else s


def serve(settings: Settings, role: str, *, http: bool = True, spec: RoleSpec | None = None) -> int:
    """Run the role until SIGINT/SIGTERM (``spec``: set up otherwise than the registry's
    one, e.g. from the command line); logs (lease changes among them) go to stderr."""
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        return run(run_roles(settings, [role], http=http, specs={role: spec} if spec else None))
    except OSError as exc:  # e.g. the HTTP port is taken
        print(f"streamproc {role}: {exc}", file=sys.stderr)
        return exitcodes.USAGE


def cmd_role_process(args: argparse.Namespace) -> int:
    role: str = args.process_role
    return serve(process_settings(args, role), role)


def register(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser], common: Common
) -> None:
    for role in ("gateway", "planner", "auditor", "feeds"):
        p = subparsers.add_parser(role, help=HELP[role], description=HELP[role])
        add_process_options(p, common, role)
        p.set_defaults(fn=cmd_role_process, process_role=role)
