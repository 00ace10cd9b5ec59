"""The ``streamproc`` command line."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from prometheus_client import start_http_server

from streamproc import __version__, cliargs, exitcodes, role_cli
from streamproc.audit.cli import register as register_audit
from streamproc.bus import streams
from streamproc.cliargs import OPS_PORT_HELP
from streamproc.client import cli as api_cli
from streamproc.config import ConfigError, Configuration, Settings
from streamproc.configfile import cli as config_cli
from streamproc.configfile.loader import activate, environment_only
from streamproc.devsetup import DevAuth, prepare_dev_auth, refuse_exposed_demo
from streamproc.events.schemas import render_catalog, write_all
from streamproc.gateway import tokens_cli
from streamproc.gateway.auth.replay import default_bucket_definition
from streamproc.impact.cli import register as register_index
from streamproc.names import DEFAULT_PREFIX, stream_names
from streamproc.natsd.cluster import DEPLOY_PORTS, serve
from streamproc.natsd.owner import claim
from streamproc.natsd.server import EmbeddedNats
from streamproc.natsd.session import CLUSTER_DIR
from streamproc.natsd.session import run as _run
from streamproc.natsd.session import with_nats as _with_nats
from streamproc.notify import cli as notify_cli
from streamproc.roles import DEMO_ONLY, ROLES, rebuild, run_roles
from streamproc.runner import cli as runner_cli
from streamproc.runner.ratebucket import definition as rate_bucket_definition
from streamproc.runtime.app import System
from streamproc.runtime.projection import Projection, describe_rejections
from streamproc.runtime.reactor import build
from streamproc.runtime.replay import partial_warning, swap_in
from streamproc.scanner import cli as scanner_cli
from streamproc.scanner.demo import Demo, seed_demo
from streamproc.signals import install_stop_signals
from streamproc.state.digest import state_digest
from streamproc.state.settings import sizes_from
from streamproc.state.store import RocksStore, StateLocked
from streamproc.status import cli as status_cli

# ---------------------------------------------------------------------- commands


class DemoExtra:
    """``up --demo`` around the running roles: dev auth for the gateway before they start,
    then the guide and the demo catalog (:func:`streamproc.scanner.demo.seed_demo`)."""

    def __init__(self) -> None:
        self.dev: DevAuth | None = None
        self.demo: Demo | None = None

    def prepare(self, settings: Settings) -> Settings:
        """The settings with the development auth selected: the roles here use it."""
        self.dev = prepare_dev_auth(settings)
        return self.dev.settings

    async def started(self, system: System) -> None:
        assert self.dev is not None
        print(self.dev.guide(system.http_url), flush=True)
        self.demo = await seed_demo(system)

    async def close(self) -> None:
        if self.demo is not None:
            await self.demo.close()


def cmd_up(args: argparse.Namespace) -> int:
    roles = [r for r in ROLES if args.demo or r not in DEMO_ONLY]
    settings = cliargs.settings(args)
    if args.demo:
        refuse_exposed_demo(settings)
    return _run(run_roles(settings, roles, extra=DemoExtra() if args.demo else None))


def cmd_role(args: argparse.Namespace) -> int:
    return _run(run_roles(cliargs.settings(args), [args.role], http=args.http_port is not None))


def cmd_nats(args: argparse.Namespace) -> int:
    s = cliargs.settings(args)
    if args.cluster:
        ports = (s.nats_port, DEPLOY_PORTS[1], DEPLOY_PORTS[2])
        return _run(serve(s.data_dir / CLUSTER_DIR, args.cluster, s.nats_host, ports, s.node_id))

    async def main() -> int:
        lock = await claim(s.nats_dir, s.node_id)
        server = EmbeddedNats(
            s.nats_dir,
            host=s.nats_host,
            port=s.nats_port,
            monitor_port=s.nats_monitor_port,
            lock=lock,
        )
        await asyncio.to_thread(server.start)
        print(f"nats-server (JetStream) listening on {server.url}, store {server.store_dir}")
        if server.monitor_url:
            print(f"monitoring: {server.monitor_url}/varz, /jsz")
        print("Press Ctrl-C to stop.", flush=True)
        stop = asyncio.Event()
        install_stop_signals(stop)
        await stop.wait()
        await asyncio.to_thread(server.stop)
        print("nats-server stopped")
        return 0

    return _run(main())


def cmd_streams_apply(args: argparse.Namespace) -> int:
    s = cliargs.settings(args)
    conf = s.configuration
    retention = conf.built(streams.events_retention_from)  # fails before connecting
    notify = conf.built(streams.notify_retention_from)

    async def apply(nc: Any) -> int:
        replicas = conf.built(streams.replicas_from) if args.replicas is None else args.replicas
        defs = streams.definitions(s.prefix, replicas, retention, notify)
        results = await streams.apply(nc, defs)
        for r in results:
            print(f"{r.stream:<24} {r.action:<10} {r.describe()}")
        if any(r.action == "drift" for r in results):
            print(
                "streamproc: drift that JetStream cannot change in place; recreate the stream "
                "(and replay) or accept the running configuration",
                file=sys.stderr,
            )
            return exitcodes.DRIFT
        return 0

    return _run(_with_nats(s, apply))


def cmd_streams_export(args: argparse.Namespace) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    prefix = args.prefix or DEFAULT_PREFIX
    replay = default_bucket_definition(prefix, args.replicas)  # the gateways create it
    rates = rate_bucket_definition(prefix, args.replicas)  # the runners create it
    for d in [*streams.definitions(prefix, args.replicas), replay, rates]:
        path = out / f"{d['name']}.json"
        path.write_text(json.dumps(d, indent=2) + "\n")
        print(path)
    # The Notify stream's window consumer: `nats consumer add <stream> --config FILE`, made
    # before the stream takes interest retention (streams apply does both).
    window = streams.window_consumer()
    path = out / f"{stream_names(prefix)[2]}.{window['durable_name']}.consumer.json"
    path.write_text(json.dumps(window, indent=2) + "\n")
    print(path)
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    s = cliargs.settings(args)
    live = s.state_dir(args.role)
    fresh = live.with_name(f"{live.name}.replay")
    busy = f"; stop the {args.role} role and run replay again"
    try:  # the role must be stopped: said now, not after the whole replay
        if live.exists():
            RocksStore(live, sizes=s.configuration.built(sizes_from)).close()
    except StateLocked as exc:
        print(f"streamproc: {exc}{busy}", file=sys.stderr)
        return exitcodes.USAGE

    if args.metrics_port is not None:
        # Replay progress (streamproc_replay_applied_sequence) for Prometheus while it runs.

        try:
            start_http_server(args.metrics_port, addr=s.http_host)
        except OSError as exc:
            raise ConfigError(f"--metrics-port {args.metrics_port}: {exc.strerror}") from None

    async def go(nc: Any) -> int:
        summary = await rebuild(
            nc,
            s.events_stream,
            args.role,
            fresh,
            progress=not args.quiet,
            allow_partial=args.allow_partial,
            configuration=s.configuration,
        )
        if summary.partial:
            print(
                f"streamproc: WARNING: {partial_warning(s.events_stream, summary.first_seq)}",
                file=sys.stderr,
            )
        try:
            swap_in(fresh, live, s.configuration.built(sizes_from))
        except StateLocked as exc:  # started meanwhile
            print(f"streamproc: {exc}{busy}", file=sys.stderr)
            return exitcodes.USAGE
        print(
            f"replayed {summary.events} events of {s.events_stream} into {live} in "
            f"{summary.seconds:.1f} s ({summary.rate:,.0f} events/s); quarantined "
            f"{summary.quarantined}, rejected {summary.rejected}"
            + (f" ({why})" if (why := describe_rejections(summary.rejections)) else "")
            + "; "
            + (f"PARTIAL from sequence {summary.first_seq}; " if summary.partial else "")
            + f"digest {summary.digest}"
        )
        return 0

    return _run(_with_nats(s, go))


def cmd_state_digest(args: argparse.Namespace) -> int:
    path = Path(args.path) if args.path else cliargs.settings(args).state_dir(args.role)
    if not (path / "CURRENT").exists():
        print(f"streamproc: {path} is not a state directory", file=sys.stderr)
        return exitcodes.USAGE
    # also works beside a running role
    sizes = cliargs.configuration(args).built(sizes_from)
    store = RocksStore(path, read_only=True, sizes=sizes)
    try:
        print(state_digest(store))
    finally:
        store.close()
    return 0


def cmd_schemas(args: argparse.Namespace) -> int:
    for path in write_all(Path(args.out)):
        print(path)
    if args.catalog:
        Path(args.catalog).parent.mkdir(parents=True, exist_ok=True)
        Path(args.catalog).write_text(render_catalog(_folds()))
        print(args.catalog)
    return 0


# ---------------------------------------------------------------------- parser


def _role_names() -> list[str]:
    return sorted(ROLES)


def _folds() -> dict[str, list[Projection]]:
    """Every registered role's projections, for the catalog's table of folds."""
    defaults = Configuration()  # what is folded, not how: the settings do not change it
    return {
        role: [build(make, defaults) for make in spec.projections] for role, spec in ROLES.items()
    }


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="streamproc", description="Event-sourced vulnerability-verdict stream processor"
    )
    parser.add_argument("--version", action="version", version=f"streamproc {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("up", help="run every role on an embedded NATS server and ./data")
    cliargs.common(p)
    p.add_argument("--nats-port", type=int, help="embedded NATS port (default 4222)")
    p.add_argument("--http-port", type=int, help="API and health port (default 8480)")
    p.add_argument("--ops-port", type=int, help=OPS_PORT_HELP)
    p.add_argument(
        "--demo",
        action="store_true",
        help="development mode: dev auth keys, the reference scanner and a seeded catalog",
    )
    p.set_defaults(fn=cmd_up)

    p = sub.add_parser("role", help="run one role's projector on its own")
    cliargs.common(p)
    p.add_argument("role", choices=_role_names())
    p.add_argument("--nats-port", type=int)
    p.add_argument("--http-port", type=int, help="serve /healthz, /readyz, /metrics on this port")
    p.set_defaults(fn=cmd_role)

    p = sub.add_parser("nats", help="run the embedded JetStream server until Ctrl-C")
    cliargs.common(p)
    p.add_argument("--nats-port", type=int)
    p.add_argument(
        "--cluster",
        type=int,
        metavar="N",
        choices=range(3, 8, 2),
        help="run a JetStream cluster of N (3, 5, 7) nodes on loopback: client ports "
        "--nats-port + i, routes 6222 + i, monitoring 8222 + i (docs/cluster.md)",
    )
    p.set_defaults(fn=cmd_nats)

    streams_p = sub.add_parser("streams", help="JetStream stream definitions")
    ssub = streams_p.add_subparsers(dest="streams_command", required=True)
    p = ssub.add_parser("apply", help="create or update the streams; report drift")
    cliargs.common(p)
    p.add_argument(
        "--replicas",
        type=int,
        choices=(0, 1, 3, 5),
        help="stream replicas; 0 = auto: 3 on a cluster of 3+ servers, else 1 "
        "(default STREAMPROC_STREAM_REPLICAS, 0)",
    )
    p.set_defaults(fn=cmd_streams_apply)
    p = ssub.add_parser("export", help="write the stream definitions as JSON")
    p.add_argument("--out", default="deploy/nats/streams")
    p.add_argument("--prefix")
    p.add_argument("--replicas", type=int, default=1, choices=(1, 3, 5))
    p.set_defaults(fn=cmd_streams_export)

    p = sub.add_parser("replay", help="rebuild a role's state from sequence 1 and swap it in")
    cliargs.common(p)
    p.add_argument("--role", required=True, choices=_role_names())
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument(
        "--metrics-port",
        type=int,
        help="serve /metrics (replay progress) on this port of the HTTP host while replaying",
    )
    p.add_argument(
        "--allow-partial",
        action="store_true",
        help="when the log no longer starts at sequence 1 (retention, purge), rebuild from "
        "its first sequence anyway; the state then lacks the older events",
    )
    p.set_defaults(fn=cmd_replay)

    state_p = sub.add_parser("state", help="state directories")
    stsub = state_p.add_subparsers(dest="state_command", required=True)
    p = stsub.add_parser("digest", help="print a digest of a state directory")
    cliargs.common(p)
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--role", choices=_role_names())
    g.add_argument("--path")
    p.set_defaults(fn=cmd_state_digest)

    p = sub.add_parser("schemas", help="write the JSON Schemas of every event kind")
    p.add_argument("--out", default="schemas")
    p.add_argument("--catalog", help="also write the Markdown event catalog here")
    p.set_defaults(fn=cmd_schemas)

    tokens_cli.register(sub)
    api_cli.register(sub)  # `api`: one DPoP-signed call to the gateway
    register_audit(sub, cliargs.common)

    register_index(sub, cliargs.common)
    runner_cli.register(sub, cliargs.common)

    role_cli.register(sub, cliargs.common)  # `gateway`, `planner`, `auditor`
    notify_cli.register(sub, cliargs.common)
    scanner_cli.register(sub, cliargs.common)  # `scanner` and `feedser export`
    config_cli.register(sub, cliargs.common)  # `config check`, `config show`, `config reference`

    status_cli.register(sub, cliargs.common)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)

    def command(args: argparse.Namespace) -> int:
        # Every setting is read here, once; commands that run or connect read the file too.
        args.configuration = (
            activate(args.config, typed=getattr(args, "typed_settings", True))
            if hasattr(args, "config")
            else environment_only()
        )
        return int(args.fn(args))

    try:
        return exitcodes.guarded(command)(args)
    except KeyboardInterrupt:
        return exitcodes.INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`streamproc config show | head`): stop quietly, as cat does;
        # stdout goes to /dev/null so the interpreter's final flush cannot fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return exitcodes.BROKEN_PIPE


if __name__ == "__main__":
    sys.exit(main())
