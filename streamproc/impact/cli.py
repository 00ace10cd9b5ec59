"""``streamproc index add|remove|stats``: load SBOMs into the ImpactIndex, and inspect it.

``add`` does the light half only: read the SBOM, normalise every purl (one bad purl refuses
the whole image, and nothing is published), and publish one ``image.indexed`` event (see
:mod:`.publish`); the role hosting the ``impact`` projection folds it. ``stats`` reads the
state directory read-only, beside a running role.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from streamproc.bus.connect import NatsConnectError, NatsVersionError
from streamproc.cliargs import common as _common
from streamproc.cliargs import configuration as _configuration
from streamproc.cliargs import settings as _settings
from streamproc.config import ConfigError
from streamproc.configfile.loader import activate
from streamproc.events.payloads import ImageRemoved
from streamproc.ids import InvalidTenant, validate_tenant
from streamproc.impact import keys as K
from streamproc.impact.groups import _OVERHEAD
from streamproc.impact.settings import cache_bytes_from, configured_projection
from streamproc.impact.stats import index_stats
from streamproc.natsd.server import NatsServerError
from streamproc.natsd.session import run as _run
from streamproc.natsd.session import with_nats as _with_nats
from streamproc.roles import ROLES
from streamproc.runtime.reactor import Configured
from streamproc.sbom.publish import UsageError, build_payload, publish_image_event
from streamproc.state.settings import sizes_from
from streamproc.state.store import RocksStore, StateLocked

EXIT_OK = 0
EXIT_USAGE = 2
IMPACT_ROLE = "planner"
"""The role whose state directory holds the index (the planner hosts the impact projection)."""


def _exits_2(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Report a UsageError as ``streamproc: ...`` with exit code 2 (under either CLI)."""

    def run(args: argparse.Namespace) -> int:
        try:
            return fn(args)
        except UsageError as exc:
            print(f"streamproc: {exc}", file=sys.stderr)
            return EXIT_USAGE

    run.__name__ = fn.__name__
    run.__doc__ = fn.__doc__
    return run


@_exits_2
def cmd_add(args: argparse.Namespace) -> int:
    settings = _settings(args)
    built = build_payload(args)
    payload, purls, used = built.payload, built.purls, built.used
    products = len({c.product_key for c in payload.components})

    async def go(nc: Any) -> int:
        out = await publish_image_event(
            settings, nc, "image.indexed", args.tenant, args.image, payload, built.sbom
        )
        if out is None:
            print(f"{args.image} of {args.tenant} is already indexed with this content")
            return EXIT_OK
        eid, seq = out
        usage = "usage unknown" if used is None else f"{used} used"
        print(
            f"published image.indexed for {args.image} of {args.tenant}: {purls} purls "
            f"({usage}), {products} product keys; event {eid}, sequence {seq}"
        )
        return EXIT_OK

    return _run(_with_nats(settings, go))


@_exits_2
def cmd_remove(args: argparse.Namespace) -> int:
    settings = _settings(args)
    try:
        validate_tenant(args.tenant)
        payload = msgspec.json.decode(
            msgspec.json.encode(ImageRemoved(digest=args.image, reason=args.reason)),
            type=ImageRemoved,
        )
    except (InvalidTenant, msgspec.ValidationError) as exc:
        raise UsageError(f"{exc}; nothing published") from None

    async def go(nc: Any) -> int:
        out = await publish_image_event(
            settings, nc, "image.removed", args.tenant, args.image, payload
        )
        if out is None:
            print(f"{args.image} of {args.tenant} is not indexed (nothing to remove)")
            return EXIT_OK
        eid, seq = out
        print(
            f"published image.removed for {args.image} of {args.tenant}; event {eid}, "
            f"sequence {seq}"
        )
        return EXIT_OK

    return _run(_with_nats(settings, go))


@_exits_2
def cmd_stats(args: argparse.Namespace) -> int:
    path = Path(args.state_dir) if args.state_dir else _default_state_dir(_settings(args))
    if not (path / "CURRENT").exists():
        raise UsageError(f"no impact state in {path}: run the role that hosts it, or --state-dir")
    # a point-in-time view beside a running role
    store = RocksStore(path, read_only=True, sizes=_configuration(args).built(sizes_from))
    try:
        if K.GROUPS_CF not in store.families():
            raise UsageError(
                f"{path} holds no impact index: the planner's state holds it "
                "(state/planner, or state/planner-p<k>-of-<N> with planner.partitions > 1)"
            )
        s = index_stats(store)
    finally:
        store.close()
    bound = _configuration(args).built(cache_bytes_from)
    warm_bytes = _OVERHEAD * s.product_keys + 2 * s.group_bytes + s.owner_bytes
    doc = {
        "stateDir": str(path),
        "images": s.images,
        "usageKnownImages": s.usage_known,
        "tenants": s.tenants,
        "productKeys": s.product_keys,
        "purls": s.purls,
        "vulns": s.vulns,
        "pendingImages": s.pending_images,
        "ownerBitmaps": s.owner_bitmaps,
        "groupValues": s.group_values,
        "bitmapBytes": s.bitmap_bytes,
        "recordBytes": s.record_bytes,
        "warmFootprintBytes": warm_bytes,
        "cacheBoundBytes": bound,
        "warm": None,
        "warmNote": "a read-only view is never warm; a running role reports "
        "streamproc_impact_warm on /metrics",
    }
    if args.json:
        print(json.dumps(doc, indent=2))
        return EXIT_OK
    mb = 1024 * 1024
    print(f"impact index in {path}")
    print(f"  images          {s.images:,} ({s.usage_known:,} with usage data)")
    print(f"  tenants         {s.tenants:,}")
    print(f"  product keys    {s.product_keys:,}")
    print(f"  purls           {s.purls:,}")
    print(f"  vulns           {s.vulns:,}")
    if s.pending_images:
        print(
            f"  pending         {s.pending_images:,} images not merged into the chunks yet "
            "(purls and bitmap bytes count merged ids only)"
        )
    print(
        f"  bitmap bytes    {s.bitmap_bytes:,} ({s.group_values:,} group chunks, "
        f"{s.owner_bitmaps:,} owner bitmaps)"
    )
    print(f"  record bytes    {s.record_bytes:,}")
    bound_text = "unbounded" if bound is None else f"{bound / mb:,.0f} MB bound"
    fits = bound is None or warm_bytes <= bound
    print(
        f"  warm            n/a for a read-only view (the role reports streamproc_impact_warm); "
        f"warming needs ~{warm_bytes / mb:,.0f} MB of the {bound_text}"
        f"{'' if fits else ' (only the hottest part will be warmed)'}"
    )
    return EXIT_OK


def _default_state_dir(settings: Any) -> Path:
    """The state directory of the first role hosting the ``impact`` projection that has
    one (the planner hosts it; a test may register another role that does), in registry
    order."""
    hosts = [
        name
        for name, spec in ROLES.items()
        if Configured(configured_projection) in spec.projections
    ]
    for name in [*hosts, IMPACT_ROLE]:
        if (settings.state_dir(name) / "CURRENT").exists():
            return Path(settings.state_dir(name))
    return Path(settings.state_dir(hosts[0] if hosts else IMPACT_ROLE))


def _common_index(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tenant", required=True)
    p.add_argument("--image", required=True, metavar="DIGEST", help="e.g. sha256:<64 hex>")


def register(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
    common: Callable[[argparse.ArgumentParser], None],
) -> None:
    """Add ``index add|remove|stats``."""
    index = subparsers.add_parser("index", help="the impact index: load SBOMs, inspect")
    isub = index.add_subparsers(dest="index_command", required=True)

    p = isub.add_parser("add", help="index an image from its SBOM (publishes image.indexed)")
    common(p)
    _common_index(p)
    p.add_argument("--repo", required=True, help="registry/repository, e.g. ghcr.io/org/app")
    p.add_argument("--namespace")
    p.add_argument("--tag", action="append", default=[], help="repeatable")
    p.add_argument("--label", action="append", default=[], metavar="K=V", help="repeatable")
    p.add_argument("--sbom", required=True, help="CycloneDX JSON (1.4-1.7) or SPDX JSON 2.2/2.3")
    p.add_argument("--used-purls", help="file: the purls the entrypoint uses, one per line")
    p.set_defaults(fn=cmd_add)

    p = isub.add_parser("remove", help="remove an image (publishes image.removed)")
    common(p)
    _common_index(p)
    p.add_argument("--reason")
    p.set_defaults(fn=cmd_remove)

    p = isub.add_parser("stats", help="size of the impact index (read-only, beside a running role)")
    common(p)
    p.add_argument(
        "--state-dir",
        help="state directory holding the index (default: that of the role hosting it, "
        "DATA/state/planner)",
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=cmd_stats)


def run_command(args: argparse.Namespace) -> int:
    """Run a parsed command; usage, configuration and connection problems exit 2."""
    try:
        return int(args.fn(args))
    except (
        UsageError,
        ConfigError,
        NatsConnectError,
        NatsServerError,
        NatsVersionError,
        StateLocked,
    ) as exc:
        print(f"streamproc: {exc}", file=sys.stderr)
        return EXIT_USAGE


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="streamproc", description="impact index commands")
    register(parser.add_subparsers(dest="command", required=True), _common)
    args = parser.parse_args(argv)
    try:
        args.configuration = activate(args.config)  # as `streamproc index` does
    except ConfigError as exc:
        print(f"streamproc: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return run_command(args)


if __name__ == "__main__":
    sys.exit(main())
