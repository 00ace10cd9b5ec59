"""``streamproc notify tail`` and ``streamproc notify schemas``.

Registered by :mod:`streamproc.cli` with ``notify_cli.register(sub, _common)``.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import msgspec
import uvloop
from nats.errors import ConnectionClosedError

from streamproc import exitcodes
from streamproc.bus import jsapi
from streamproc.bus.pull import ConsumerGone
from streamproc.cancellation import checkpoint
from streamproc.cliargs import configuration
from streamproc.client.http import ApiClient
from streamproc.client.settings import client_of, dpop_key, token_source
from streamproc.client.tokens import StaticToken
from streamproc.config import ConfigError, Settings, load
from streamproc.configfile.registry import env_name
from streamproc.names import NOTIFY_TAIL, READ_SCOPE, stream_names
from streamproc.natsd.session import nats_session
from streamproc.notify import messages as nm
from streamproc.notify.consumer import ConsumerConflict, NotifyConsumer, default_durable, render
from streamproc.notify.feed_consumer import (
    ConsumerSettings,
    FeedClosed,
    FeedConsumer,
)
from streamproc.notify.feed_consumer import (
    from_section as consumer_settings,
)
from streamproc.notify.feed_http import epoch_of
from streamproc.notify.feed_state import Checkpoint, FeedState
from streamproc.notify.schemas import write_all
from streamproc.signals import until_signalled

TOKEN_ENV = env_name("notify.token")


def register(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
    common: Callable[[argparse.ArgumentParser], None],
) -> None:
    notify = subparsers.add_parser("notify", help="the Notify side: tail deltas, JSON Schemas")
    nsub = notify.add_subparsers(dest="notify_command", required=True)
    p = nsub.add_parser("tail", help="print deltas as they arrive; resumes where it left off")
    common(p)
    p.add_argument(
        "--tenant", action="append", default=[],
        help="NATS: one tenant (default: every tenant); --http: the tenants to follow "
        "(repeatable; default notify.tenants, or a static token's tenant)",
    )  # fmt: skip
    p.add_argument(
        "--durable",
        help=f"durable consumer / checkpoint name (default {NOTIFY_TAIL}, or "
        f"{NOTIFY_TAIL}-TENANT-KINDS for another selection; tails with one name share its "
        "messages)",
    )
    p.add_argument(
        "--kind", action="append", choices=nm.KINDS,
        help="message kinds (repeatable; default rescan.delta)",
    )  # fmt: skip
    p.add_argument(
        "--http", metavar="URL", nargs="?", const="",
        help="follow the gateway's HTTP feed instead of NATS (URL default: notify.base_url)",
    )  # fmt: skip
    p.add_argument(
        "--token",
        help=f"access token for --http, bound to this client's DPoP key (default "
        f"${TOKEN_ENV}; else client credentials, docs/notify.md)",
    )
    p.add_argument(
        "--state",
        help="checkpoints and leases of --http (default DATA/notify/NAME.sqlite)",
    )
    p.add_argument(
        "--reset", action="store_true",
        help="delete the durable consumer first: start over from the oldest message (NATS only)",
    )  # fmt: skip
    p.add_argument("--once", action="store_true", help="stop once caught up")
    p.add_argument("--json", action="store_true", help="print the raw JSON messages")
    p.set_defaults(fn=cmd_tail)
    p = nsub.add_parser("schemas", help="write the Notify JSON Schemas")
    p.add_argument("--out", default="schemas/notify")
    p.set_defaults(fn=cmd_schemas)


def cmd_schemas(args: argparse.Namespace) -> int:
    for path in write_all(Path(args.out)):
        print(path)
    return 0


TAIL_RECONNECTS = 20
"""Reconnects (0.5 s apart) ``notify tail`` makes before it says NATS went away: ~10 s."""
STOPS = {signal.SIGINT: exitcodes.INTERRUPTED, signal.SIGTERM: exitcodes.OK}
"""How a tail stops: on either signal, its loop cancelled and its cleanup run, with these
exit codes, even when it was started with SIGINT ignored."""


def cmd_tail(args: argparse.Namespace) -> int:
    settings = load(
        {
            "data_dir": getattr(args, "data_dir", None),
            "nats_url": getattr(args, "nats_url", None),
            "prefix": getattr(args, "prefix", None),
        },
        configuration(args),
    )
    kinds = args.kind or ["rescan.delta"]

    def show(msg: nm.AnyMessage, seq: int) -> None:
        print(nm.encode(msg).decode() if args.json else render(msg, seq), flush=True)

    if args.http is not None:
        if args.reset:
            print("streamproc: --reset is for NATS; over --http a checkpoint is never reset by "
                  "the tail: to start over, remove its --state file", file=sys.stderr)  # fmt: skip
            return exitcodes.USAGE
        return _tail_http(settings, args, show)
    if len(args.tenant) > 1:
        print("streamproc: over NATS, --tenant names one tenant", file=sys.stderr)
        return exitcodes.USAGE

    try:  # --nats-url, else the data directory's running server (or a temporary one)
        return int(uvloop.run(until_signalled(_tail_nats(settings, args, kinds, show), STOPS)))
    except ConsumerConflict as exc:
        print(f"streamproc: notify tail: {exc}: pass another --durable, or --reset to take "
              "the name over", file=sys.stderr)  # fmt: skip
        return exitcodes.known(exc)
    except (ConsumerGone, ConnectionClosedError) as exc:  # the server stopped (make run did)
        print(f"streamproc: notify tail: NATS went away ({exc or type(exc).__name__}); run "
              "it again once the server is back: it resumes after the last message it printed",
              file=sys.stderr)  # fmt: skip
        return exitcodes.known(exc)
    except KeyboardInterrupt:
        return exitcodes.INTERRUPTED


def _tail_http(
    settings: Settings, args: argparse.Namespace, show: Callable[[nm.AnyMessage, int], None]
) -> int:
    client = client_of(settings.configuration)
    key = dpop_key(settings.data_dir, client)
    static = args.token or settings.configuration.get(TOKEN_ENV)  # as given: a secret
    tokens = token_source(
        key, token=static, token_flag=f"--token / {TOKEN_ENV}", scopes=(READ_SCOPE,), client=client
    )
    own = tokens.tenant if isinstance(tokens, StaticToken) else None
    cs = consumer_settings(
        settings.configuration.sections.notify, base_url=args.http, tenants=args.tenant,
        kinds=args.kind or [], token_tenant=own,
    )  # fmt: skip
    if isinstance(tokens, StaticToken) and own is not None and cs.tenants != (own,):
        raise ConfigError(
            f"a static token serves its own tenant ({own}), not {', '.join(cs.tenants)}: use "
            "client credentials (docs/notify.md) to follow several tenants"
        )
    name = args.durable or NOTIFY_TAIL
    state = FeedState(Path(args.state or settings.data_dir / "notify" / f"{name}.sqlite"),
                      ttl_s=cs.lease_ttl_s)  # fmt: skip
    _adopt_legacy(settings.data_dir / "notify" / f"{name}.json", state, cs)
    consumer = FeedConsumer(cs, ApiClient(key, tokens, timeout_s=cs.http_timeout_s), state, show)
    try:
        return int(uvloop.run(until_signalled(consumer.run(once=args.once), STOPS)))
    except FeedClosed as exc:
        print(f"streamproc: notify tail stopped (fail closed): {exc}. The checkpoint is kept; "
              "nothing was skipped (docs/notify.md: recovering)", file=sys.stderr)  # fmt: skip
        return exitcodes.known(exc)
    except KeyboardInterrupt:
        return exitcodes.INTERRUPTED


class _LegacyCheckpoint(msgspec.Struct):
    url: str
    kind: str
    epoch: str
    seq: int


def _adopt_legacy(path: Path, state: FeedState, cs: ConsumerSettings) -> None:
    """An earlier version's checkpoint file (one tenant, its epoch the stream's creation
    time): taken over once, for the one partition it can be."""
    if not path.exists() or len(cs.tenants) != 1:
        return
    try:
        old = msgspec.json.decode(path.read_bytes(), type=_LegacyCheckpoint)
        epoch = epoch_of(old.epoch)
    except (msgspec.DecodeError, ValueError) as exc:
        print(f"streamproc: {path} is not a checkpoint of an earlier notify tail ({exc}); "
              "left alone", file=sys.stderr)  # fmt: skip
        return
    if old.kind in cs.kinds and state.adopt(cs.tenants[0], old.kind, Checkpoint(epoch, old.seq),
                                             old.url):  # fmt: skip
        print(f"streamproc: took over the checkpoint of {path} ({cs.tenants[0]} {old.kind} at "
              f"{old.seq}); it is no longer read", file=sys.stderr)  # fmt: skip


async def _tail_nats(
    settings: Settings,
    args: argparse.Namespace,
    kinds: list[str],
    show: Callable[[nm.AnyMessage, int], None],
) -> int:
    prefix = settings.prefix
    tenant = args.tenant[0] if args.tenant else None
    durable = args.durable or default_durable(tenant, kinds)
    async with nats_session(settings, name="streamproc-notify-tail") as nc:
        # A server that is gone without a word (killed, crashed) ends the tail as a stopped
        # one does, once these reconnects have failed, instead of leaving it silent.
        nc.options["max_reconnect_attempts"] = TAIL_RECONNECTS
        if args.reset:
            await jsapi.delete_consumer(nc, stream_names(prefix)[2], durable)
        async with NotifyConsumer(
            nc, durable=durable, prefix=prefix, tenant=tenant, kinds=kinds
        ) as feed:
            return await _follow(feed, args.once, show)


async def _follow(
    feed: NotifyConsumer, once: bool, show: Callable[[nm.AnyMessage, int], None]
) -> int:
    while True:
        checkpoint()
        if feed.nc.is_closed:  # the reconnects gave up
            raise ConnectionClosedError
        batch = await feed.fetch(timeout=1.0)
        if not batch and once:
            return 0
        for msg, seq, reply in batch:
            show(msg, seq)
            await feed.ack(reply)  # after printing: a restart resumes after it
        await asyncio.sleep(0)
