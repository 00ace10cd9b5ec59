"""``streamproc index add|remove|stats``: load SBOMs into the ImpactIndex, and inspect it.

``add`` does the light half only: read the SBOM, normalise every purl (one bad purl refuses
the whole image, and nothing is published), and publish one ``image.indexed`` event; the
``impact`` role folds it. Edits to one image are serialised on its subject with
``Nats-Expected-Last-Subject-Sequence``, and the event id is derived from the content and
that sequence: a retry is de-duplicated by JetStream, re-running an unchanged ``add`` is
a no-op, and removing then re-adding an image is not mistaken for a duplicate.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

EXIT_OK = 0
EXIT_USAGE = 2
IMPACT_ROLE = "planner"
"""The role whose state directory holds the index (the planner hosts the impact projection)."""
NO_MESSAGE = 10037


class UsageError(Exception):
    """Bad input or environment: exit code 2, nothing published."""


def split_repo(ref: str) -> tuple[str, str]:
    """``ghcr.io/org/app`` -> (ghcr.io, org/app); ``nginx`` -> (docker.io, library/nginx),
    as Docker reads image references: the first part is a registry only if it looks like a
    host (has a dot or a port, or is localhost)."""
    first, sep, rest = ref.strip().partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        if not rest:
            raise UsageError(f"--repo {ref!r}: no repository after the registry")
        return first, rest
    if not first:
        raise UsageError(f"--repo {ref!r} is empty")
    return "docker.io", ref if sep else f"library/{ref}"


def _labels(pairs: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        k, sep, v = pair.partition("=")
        if not sep or not k:
            raise UsageError(f"--label {pair!r} is not of the form key=value")
        out[k] = v
    return out


def _used_purls(path: str | None) -> set[str]:
    """Canonical purls listed one per line (blank lines and ``#`` comments skipped)."""
    from streamproc.impact.purls import PurlError, normalize_purl

    if path is None:
        return set()
    out: set[str] = set()
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        s = line.strip()
        if s and not s.startswith("#"):
            try:
                out.add(normalize_purl(s).purl)
            except PurlError as exc:
                raise UsageError(
                    f"{path}:{n}: invalid purl {exc.purl!r}: {exc.reason}; nothing published"
                ) from None
    return out


def build_payload(args: argparse.Namespace) -> tuple[Any, int, int]:
    """The validated ``image.indexed`` payload, its purl count and used count."""
    from streamproc.events.payloads import MAX_KEYS, Component, ImageIndexed
    from streamproc.ids import InvalidTenant, validate_tenant
    from streamproc.impact.purls import PurlError, normalize_purl
    from streamproc.impact.records import build_image
    from streamproc.impact.sbom import SbomError, read_sbom

    try:
        validate_tenant(args.tenant)
    except InvalidTenant as exc:
        raise UsageError(str(exc)) from None
    registry, repo = split_repo(args.repo)
    try:
        sbom = read_sbom(args.sbom)
    except (OSError, SbomError) as exc:
        raise UsageError(f"{exc}; nothing published") from None
    if len(sbom.purls) > MAX_KEYS:
        raise UsageError(
            f"{args.sbom}: {len(sbom.purls)} purls; at most {MAX_KEYS} per image are "
            f"allowed; nothing published"
        )
    used = _used_purls(args.used_purls)
    try:
        flags = [normalize_purl(p).purl in used for p in sbom.purls]
        rec = build_image(
            tenant=args.tenant,
            digest=args.image,
            purls=sbom.purls,
            used=flags,
            registry=registry,
            repo=repo,
            namespace=args.namespace or "",
            tags=args.tag,
            labels=_labels(args.label),
        )
    except PurlError as exc:
        raise UsageError(
            f"{args.sbom}: invalid purl {exc.purl!r}: {exc.reason}; the image is refused "
            f"and nothing was published"
        ) from None
    missing = used - set(rec.purls)
    if missing:
        raise UsageError(
            f"{args.used_purls}: {len(missing)} used purl(s) not in the SBOM, e.g. "
            f"{sorted(missing)[0]!r}; nothing published"
        )
    payload = ImageIndexed(
        digest=args.image,
        registry=registry,
        repository=repo,
        namespace=args.namespace or None,
        tags=rec.tags,
        labels=rec.labels,
        components=[
            Component(purl=p, product_key=k, used=u)
            for p, k, u in zip(rec.purls, rec.product_keys, rec.used, strict=True)
        ],
    )
    try:  # msgspec validates on decode only: round-trip to apply the schema's limits
        msgspec.json.decode(msgspec.json.encode(payload), type=ImageIndexed)
    except msgspec.ValidationError as exc:
        raise UsageError(f"image.indexed payload refused: {exc}; nothing published") from None
    return payload, len(rec.purls), sum(rec.used)


async def _last_on_subject(nc: Any, stream: str, subject: str) -> tuple[int, bytes | None]:
    """Sequence and data of the subject's last message (0, None when there is none)."""
    from streamproc.bus import jsapi

    try:
        doc = await jsapi.request(nc, f"STREAM.MSG.GET.{stream}", {"last_by_subj": subject})
    except jsapi.JsApiError as exc:
        if exc.err_code == NO_MESSAGE:
            return 0, None
        raise
    msg = doc["message"]
    return int(msg["seq"]), base64.b64decode(msg.get("data") or "")


def _payload_digest(payload: Any) -> str:
    return hashlib.sha256(msgspec.json.encode(payload)).hexdigest()


async def _publish(
    settings: Any, nc: Any, kind: str, tenant: str, digest: str, payload: Any
) -> tuple[str, int, bool] | None:
    """Publish after the subject's last event; None when that event already says this."""
    from streamproc.bus import jsapi
    from streamproc.bus.publisher import Publisher, WrongExpectedSequence
    from streamproc.events.catalog import subject_for
    from streamproc.events.envelope import EventError, decode, new_event
    from streamproc.hlc import HybridLogicalClock
    from streamproc.ids import derive_id

    stream = settings.events_stream
    if await jsapi.stream_info(nc, stream) is None:
        raise UsageError(f"stream {stream} does not exist: run `streamproc streams apply`")
    subject = subject_for(settings.prefix, tenant, kind, payload)
    content = _payload_digest(payload)
    clock = HybridLogicalClock(settings.node_id)
    pub = await Publisher(nc, prefix=settings.prefix).start()
    try:
        for _ in range(3):
            last, data = await _last_on_subject(nc, stream, subject)
            prev = None
            if data:
                try:
                    prev = decode(data)
                except EventError:
                    prev = None
            if kind == "image.removed":
                if prev is None or prev.kind == "image.removed":
                    return None
            elif (
                prev is not None and prev.kind == kind and _payload_digest(prev.payload) == content
            ):
                return None
            eid = derive_id(kind, tenant, digest, content, last)
            event = new_event(kind, tenant, payload, clock.now(), event_id=eid)
            try:
                ack = await pub.publish_event(event, expected_last_subject_seq=last)
            except WrongExpectedSequence:
                continue  # someone else wrote this image meanwhile: look again
            return eid, ack.seq, ack.duplicate
        raise UsageError(f"image {digest} keeps changing under us; try again")
    finally:
        await pub.close()


def cmd_add(args: argparse.Namespace) -> int:
    from streamproc.cli import _run, _settings, _with_nats

    settings = _settings(args)
    payload, purls, used = build_payload(args)
    products = len({c.product_key for c in payload.components})

    async def go(nc: Any) -> int:
        out = await _publish(settings, nc, "image.indexed", args.tenant, args.image, payload)
        if out is None:
            print(f"{args.image} of {args.tenant} is already indexed with this content")
            return EXIT_OK
        eid, seq, dup = out
        print(
            f"published image.indexed for {args.image} of {args.tenant}: {purls} purls "
            f"({used} used), {products} product keys; event {eid}, sequence {seq}"
            f"{' (duplicate)' if dup else ''}"
        )
        return EXIT_OK

    return _run(_with_nats(settings, go))


def cmd_remove(args: argparse.Namespace) -> int:
    from streamproc.cli import _run, _settings, _with_nats
    from streamproc.events.payloads import ImageRemoved
    from streamproc.ids import InvalidTenant, validate_tenant

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
        out = await _publish(settings, nc, "image.removed", args.tenant, args.image, payload)
        if out is None:
            print(f"{args.image} of {args.tenant} is not indexed (nothing to remove)")
            return EXIT_OK
        eid, seq, _ = out
        print(
            f"published image.removed for {args.image} of {args.tenant}; event {eid}, "
            f"sequence {seq}"
        )
        return EXIT_OK

    return _run(_with_nats(settings, go))


def cmd_stats(args: argparse.Namespace) -> int:
    from streamproc.cli import _settings
    from streamproc.impact import keys as K
    from streamproc.impact.groups import _OVERHEAD
    from streamproc.impact.projection import _env_cache_bytes
    from streamproc.impact.stats import index_stats
    from streamproc.state.store import RocksStore

    path = Path(args.state_dir) if args.state_dir else _settings(args).state_dir(IMPACT_ROLE)
    if not (path / "CURRENT").exists():
        raise UsageError(f"no impact state in {path}: run the impact role first, or --state-dir")
    store = RocksStore(path, read_only=True)  # a point-in-time view beside a running role
    try:
        if K.GROUPS_CF not in store.families():
            raise UsageError(f"{path} holds no impact index (is it the impact role's state?)")
        s = index_stats(store)
    finally:
        store.close()
    bound = _env_cache_bytes()
    warm_bytes = _OVERHEAD * s.product_keys + 2 * s.group_bytes + s.owner_bytes
    doc = {
        "stateDir": str(path),
        "images": s.images,
        "tenants": s.tenants,
        "productKeys": s.product_keys,
        "purls": s.purls,
        "vulns": s.vulns,
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
    print(f"  images          {s.images:,}")
    print(f"  tenants         {s.tenants:,}")
    print(f"  product keys    {s.product_keys:,}")
    print(f"  purls           {s.purls:,}")
    print(f"  vulns           {s.vulns:,}")
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


def _common_index(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tenant", required=True)
    p.add_argument("--image", required=True, metavar="DIGEST", help="e.g. sha256:<64 hex>")


def register(
    subparsers: argparse._SubParsersAction,  # type: ignore[type-arg]
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
    p.add_argument("--sbom", required=True, help="CycloneDX JSON (1.4-1.6) or SPDX JSON 2.2/2.3")
    p.add_argument("--used-purls", help="file: the purls the entrypoint uses, one per line")
    p.set_defaults(fn=cmd_add)

    p = isub.add_parser("remove", help="remove an image (publishes image.removed)")
    common(p)
    _common_index(p)
    p.add_argument("--reason")
    p.set_defaults(fn=cmd_remove)

    p = isub.add_parser("stats", help="size of the impact index (read-only, beside a running role)")
    common(p)
    p.add_argument("--state-dir", help="impact state directory (default DATA/state/impact)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=cmd_stats)


def run_command(args: argparse.Namespace) -> int:
    """Run a parsed command; usage, configuration and connection problems exit 2."""
    from streamproc.bus.connect import NatsConnectError, NatsVersionError
    from streamproc.bus.server import NatsServerError
    from streamproc.config import ConfigError
    from streamproc.state.store import StateLocked

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
    from streamproc.cli import _common

    parser = argparse.ArgumentParser(prog="streamproc", description="impact index commands")
    register(parser.add_subparsers(dest="command", required=True), _common)
    return run_command(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
