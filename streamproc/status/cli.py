"""``streamproc status [--nats-url URL] [--roles R,…] [--json]``."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from streamproc.cliargs import configuration
from streamproc.config import ConfigError, load
from streamproc.natsd.session import nats_session, run
from streamproc.planner.settings import from_sections as planner_from_sections
from streamproc.roles import ROLES
from streamproc.status.record import bucket_name
from streamproc.status.report import EXIT_UNHEALTHY, as_json, gather, render

SERVICE_ROLES = ("auditor", "gateway", "planner", "runner")
"""Expected by default; ``activity`` is a diagnostic view that only ``up`` runs."""


def _expected(arg: str | None) -> list[str]:
    if not arg:
        return list(SERVICE_ROLES)
    roles = [r.strip() for r in arg.split(",") if r.strip()]
    unknown = sorted(set(roles) - set(ROLES))
    if unknown:
        raise ConfigError(f"--roles: unknown role(s) {', '.join(unknown)}; roles: {sorted(ROLES)}")
    return roles


def cmd_status(args: argparse.Namespace) -> int:
    # --nats-port: a local server on that port (no auth), instead of the data directory's
    nats_url = args.nats_url or (f"nats://127.0.0.1:{args.nats_port}" if args.nats_port else None)
    settings = load(
        {
            "data_dir": args.data_dir,
            "nats_url": nats_url,
            "prefix": args.prefix,
            "node_id": args.node_id,
        },
        configuration(args),
    )
    expected = _expected(args.roles)
    where = settings.nats_url or f"the NATS server of {settings.data_dir}"

    async def main() -> int:
        async with nats_session(settings, name="streamproc-status") as nc:
            partitions = settings.configuration.built(planner_from_sections).partitions
            report = await gather(nc, settings, expected, partitions)
        if report is None:
            msg = f"no status bucket {bucket_name(settings.prefix)} at {where}: no role has run "
            msg += f"with prefix {settings.prefix!r} there"
            if args.json:
                print(json.dumps({"ok": False, "problems": [msg]}))
            else:
                print(f"streamproc: {msg}")
            return EXIT_UNHEALTHY
        print(json.dumps(as_json(report), indent=2) if args.json else render(report))
        return 0 if report.ok else EXIT_UNHEALTHY

    return run(main())


def register(sub: Any, common: Callable[[argparse.ArgumentParser], None]) -> None:
    p = sub.add_parser(
        "status",
        help="each running role instance: position, stream head, lag, health, lease",
        description="Reads the role heartbeats (KV bucket <prefix>_status). Exits 1 when an "
        "instance is failed, lagging or stale, or an expected role has no running instance.",
    )
    common(p)
    p.add_argument(
        "--nats-port",
        type=int,
        help="a local server on this port instead of the one running on --data-dir",
    )
    p.add_argument(
        "--roles",
        help="comma-separated roles that must be running (default: auditor,gateway,planner,runner)",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(fn=cmd_status)
