"""``streamproc bundle export|import``: offline merge from the command line."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from streamproc import exitcodes
from streamproc.audit.bundle import BundleError, build_bundle, import_bundle, read_tenant_messages
from streamproc.audit.common import (
    UsageError,
    keyring_from_args,
    open_state,
    settings_from_args,
    state_dir,
)
from streamproc.audit.layout import read_head
from streamproc.audit.signing import load_signer
from streamproc.bus import jsapi
from streamproc.bus.publisher import Publisher
from streamproc.hlc import HlcError, HybridLogicalClock, Timestamp, wall_ms
from streamproc.natsd.session import run as _run
from streamproc.natsd.session import with_nats as _with_nats


def cmd_bundle_export(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    if args.since:
        try:
            Timestamp.parse(args.since)
        except HlcError as exc:
            raise UsageError(str(exc)) from None
    signer = load_signer(settings.data_dir, env=settings.configuration.values)
    head = None
    path = state_dir(args, settings)
    if (path / "CURRENT").exists():
        with open_state(path, settings) as store:
            head = read_head(store, args.tenant)

    async def go(nc: Any) -> int:
        if await jsapi.stream_info(nc, settings.events_stream) is None:
            raise UsageError(f"stream {settings.events_stream} does not exist")
        messages = await read_tenant_messages(
            nc, settings.events_stream, settings.prefix, args.tenant
        )
        data, count = build_bundle(
            args.tenant,
            messages,
            since=args.since,
            exported_by=settings.node_id,
            exported_hlc=HybridLogicalClock(settings.node_id).now(),
            chain_head=head,
            signer=signer,
        )
        Path(args.out).write_bytes(data)
        where = (
            f"chain head {head.head_chain_link} at {head.entries} entries"
            if head is not None
            else "no chain head (no auditor state here)"
        )
        print(
            f"wrote {args.out}: {count} events of tenant {args.tenant}"
            f"{' after ' + args.since if args.since else ''}, {where}, signed by {signer.key_id}"
        )
        return exitcodes.OK

    return _run(_with_nats(settings, go))


def cmd_bundle_import(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    try:
        data = Path(args.file).read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read {args.file}: {exc.strerror}") from None
    keyring = keyring_from_args(args, settings)
    if len(keyring) == 0:
        raise UsageError(
            "no trusted keys: pass --trusted-key keyid=BASE64 of the exporting installation"
        )

    async def go(nc: Any) -> int:
        if await jsapi.stream_info(nc, settings.events_stream) is None:
            raise UsageError(
                f"stream {settings.events_stream} does not exist: run `streamproc streams apply`"
            )
        publisher = await Publisher(nc, prefix=settings.prefix).start()
        try:
            report = await import_bundle(
                nc,
                publisher,
                settings.events_stream,
                data,
                keyring,
                now_ms=wall_ms(),
                max_skew_ms=settings.max_clock_skew_ms,
            )
        except BundleError as exc:
            print(f"streamproc: bundle refused, nothing imported: {exc}", file=sys.stderr)
            return exitcodes.FAILED
        finally:
            await publisher.close()
        print(
            f"imported {args.file} (tenant {report.tenant}, from {report.exported_by}, signed "
            f"by {report.key_id}): {report.events} events, {report.published} published, "
            f"{report.already_present} already present, {report.duplicates} de-duplicated"
            + ("; exporter's chain head verified" if report.chain_head_checked else "")
        )
        if not report.order_preserved:
            print("warning: a retry changed the stored order of the published events")
        return exitcodes.OK

    return _run(_with_nats(settings, go))
