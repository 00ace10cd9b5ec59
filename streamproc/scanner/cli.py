"""``streamproc scanner`` (the reference scanner), ``streamproc feedser export`` and
``streamproc vexer export``.

Registered by :mod:`streamproc.cli` with ``scanner_cli.register(sub, _common)``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import uvloop

from streamproc import exitcodes
from streamproc.cliargs import add_config_flag, configuration
from streamproc.cliargs import settings as _settings
from streamproc.client.http import Unreachable
from streamproc.client.tokens import TokenRefused, TokenUnavailable
from streamproc.config import ConfigError, load
from streamproc.gateway.tokens_cli import KeyFileError
from streamproc.role_cli import DEFAULT_NATS_URL
from streamproc.roles import System
from streamproc.scanner import vexer
from streamproc.scanner.advisories import AdvisoryDb, AdvisoryError
from streamproc.scanner.faults import FaultConfig
from streamproc.scanner.feedser import (
    WEBHOOK_PATH,
    build_export,
    deliver_export,
    load_state,
    next_state,
    sending_state,
    signed_headers,
)
from streamproc.scanner.indexed import IndexedImages
from streamproc.scanner.sender_auth import SenderKind, credentials
from streamproc.scanner.service import start_scanner
from streamproc.signals import install_stop_signals


def register(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
    common: Callable[[argparse.ArgumentParser], None],
) -> None:
    p = subparsers.add_parser(
        "scanner",
        help="run the reference scanner on 127.0.0.1",
        description="The reference scanner: knows every image the index knows (it folds "
        "image.indexed/image.removed from the event log into DATA/state/scanner) and answers "
        "POST /reports. Connects to --nats-url (NATS_URL, default nats://127.0.0.1:4222).",
    )
    common(p)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8490)
    p.add_argument("--osv", type=Path, help="directory of OSV JSON advisories")
    p.add_argument("--kev", type=Path, help="CISA KEV catalog JSON")
    p.add_argument("--epss", type=Path, help="FIRST's EPSS scores CSV (gzipped or not)")
    p.add_argument("--debian-sources", type=Path, help="Debian binary→source package map")
    p.add_argument("--latency-ms", type=float, default=0.0, help="simulated latency per call")
    p.add_argument("--jitter-ms", type=float, default=0.0)
    p.set_defaults(fn=cmd_scanner)

    feedser = subparsers.add_parser("feedser", help="advisory-aggregator tools")
    fsub = feedser.add_subparsers(dest="feedser_command", required=True)
    p = fsub.add_parser("export", help="send new/changed OSV advisories as the Feedser webhook")
    p.add_argument("--osv", type=Path, required=True, help="directory of OSV JSON advisories")
    p.add_argument("--kev", type=Path, help="CISA KEV catalog JSON (marks KEV ids)")
    p.add_argument("--epss", type=Path, help="FIRST's EPSS scores CSV (ranks the work)")
    p.add_argument("--debian-sources", type=Path, help="Debian binary→source package map")
    _sender_flags(p, "feedser", "Feedser")
    p.set_defaults(fn=cmd_feedser_export)

    vexer = subparsers.add_parser("vexer", help="VEX-source tools")
    vsub = vexer.add_subparsers(dest="vexer_command", required=True)
    p = vsub.add_parser(
        "export",
        help="send the changed claims of a directory of VEX documents as the Vexer webhook",
        description="Reads every *.json in --vex (OpenVEX, CycloneDX VEX, CSAF 2.0 VEX), "
        "checks each against its format's schema, and sends the claims that changed since "
        "the last export (remembered in --state) as a signed Vexer webhook.",
    )
    p.add_argument("--vex", type=Path, required=True, help="directory of VEX documents")
    _sender_flags(p, "vexer", "Vexer")
    p.set_defaults(fn=cmd_vexer_export)


def _sender_flags(p: argparse.ArgumentParser, kind: SenderKind, label: str) -> None:
    """The flags ``feedser export`` and ``vexer export`` share: where to send, what to sign
    with, which token to present for which tenants, where the state is."""
    env = f"STREAMPROC_{kind.upper()}"
    p.add_argument("--url", default="http://127.0.0.1:8480", help="gateway base URL")
    p.add_argument("--secret", help=f"HMAC secret (default ${env}_SECRET)")
    p.add_argument("--ed25519-seed-file", type=Path, help="32-byte Ed25519 seed to sign with")
    p.add_argument("--source", help=f"X-Scheduler-Source (needed with several {label} sources)")
    p.add_argument(
        "--token",
        help=f"access token to present, DPoP-bound to the client key (default ${env}_TOKEN; "
        f"else client credentials, or tokens minted from {kind}.issuer_key, with `make run` "
        "from its development issuer)",
    )
    p.add_argument(
        "--tenant",
        action="append",
        default=[],
        help=f"a tenant to deliver to with a minted token (repeatable; default {kind}.tenants, "
        f"or with `make run` its {label} source's tenants)",
    )
    p.add_argument(
        "--data-dir",
        help="data directory (default ./data, STREAMPROC_DATA_DIR): holds the state and the "
        "client's DPoP key",
    )
    p.add_argument(
        "--state", type=Path, help=f"what was exported already (default DATA/{kind}-export.json)"
    )
    add_config_flag(p)
    p.add_argument("--dry-run", action="store_true", help="print the body; send nothing")


def cmd_scanner(args: argparse.Namespace) -> int:
    settings = _settings(args)
    if not settings.nats_url:  # like a role process: never an embedded server of its own
        settings = msgspec.structs.replace(settings, nats_url=DEFAULT_NATS_URL)

    async def main() -> int:
        system = System(settings, ["scanner"], http=False)
        svc = None
        try:
            await system.start()
            svc = await start_scanner(
                host=args.host,
                port=args.port,
                osv_dir=args.osv,
                kev_file=args.kev,
                epss_file=args.epss,
                sources=args.debian_sources,
                images=IndexedImages.of(system),
                faults=FaultConfig(latency_ms=args.latency_ms, jitter_ms=args.jitter_ms),
            )
            db = svc.catalog.db
            print(f"reference scanner on {svc.url}: {len(db.advisories)} advisories, "
                  f"{len(db.kev)} KEV ids, {len(db.epss)} EPSS scores; images from "
                  f"{settings.events_stream} on {settings.nats_url}, state in "
                  f"{settings.state_dir('scanner')}", flush=True)  # fmt: skip
            stop = asyncio.Event()
            install_stop_signals(stop)
            return await system.wait(stop)
        finally:
            if svc is not None:
                await svc.close()
            await system.close()

    return int(uvloop.run(main()))


def _send(
    args: argparse.Namespace,
    kind: SenderKind,
    data_dir: Path,
    body: dict[str, Any],
    save: Callable[[dict[str, Any]], None],
    pending: dict[str, Any],
    path: str,
) -> int:
    """Sign ``body`` and deliver it with a DPoP-bound token per tenant (``pending`` saved
    first, so a retry sends the same export): ``OK`` when the gateway accepted every
    delivery; otherwise the exit code, and a message that says what to do."""
    conf = configuration(args)
    var = f"STREAMPROC_{kind.upper()}_SECRET"
    secret = args.secret or conf.get(var)
    seed = args.ed25519_seed_file.read_bytes()[:32] if args.ed25519_seed_file else None
    if not secret and not seed:
        print(f"streamproc: nothing to sign the export with: pass --secret (or set {var}; "
              "`make run` prints it) or --ed25519-seed-file", file=sys.stderr)  # fmt: skip
        return exitcodes.USAGE
    try:
        creds = credentials(
            data_dir,
            conf,
            token=args.token,
            tenants=args.tenant,
            source=args.source,
            kind=kind,
        )
    except (ConfigError, KeyFileError) as exc:
        print(f"streamproc: {exc}", file=sys.stderr)
        return exitcodes.USAGE
    named = ", ".join(t for t in creds.tenants if t)
    print(f"presenting {creds.how}" + (f" for tenant(s) {named}" if named else ""))

    def headers(raw: bytes, delivery: str) -> dict[str, str]:
        return signed_headers(raw, delivery, secret=secret, ed25519_seed=seed, source=args.source)

    save(pending)
    try:
        answers = asyncio.run(deliver_export(args.url, body, headers, creds, path=path))
    except (aiohttp.ClientError, TimeoutError, Unreachable, TokenUnavailable) as exc:
        why = str(exc) or type(exc).__name__
        print(f"streamproc: the gateway at {args.url} did not answer ({why}); run this again "
              "to send the same export", file=sys.stderr)  # fmt: skip
        return exitcodes.FAILED
    except TokenRefused as exc:
        print(f"streamproc: {exc}", file=sys.stderr)
        return exitcodes.USAGE
    refused = False
    for tenant, status, answer in answers:
        shown = answer if isinstance(answer, str) else json.dumps(answer)
        who = f" (tenant {tenant})" if tenant else ""
        print(f"gateway answered {status}{who}: {shown}")
        refused |= status >= 300
        if status == 401 and creds.tokens is None:
            print(f"streamproc: the source takes an access token: configure {kind}.token "
                  f"(STREAMPROC_{kind.upper()}_TOKEN), client credentials (client.*) or "
                  f"{kind}.issuer_key", file=sys.stderr)  # fmt: skip
    if refused:
        print("streamproc: export not accepted; run this again to send the same export",
              file=sys.stderr)  # fmt: skip
        return exitcodes.FAILED
    return exitcodes.OK


def _saver(path: Path) -> Callable[[dict[str, Any]], None]:
    def save(doc: dict[str, Any]) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc, indent=1) + "\n")

    return save


def cmd_vexer_export(args: argparse.Namespace) -> int:
    data_dir = load({"data_dir": args.data_dir}, configuration(args)).data_dir
    state_path = args.state or data_dir / "vexer-export.json"
    try:
        docs = vexer.read_dir(args.vex)
        state = load_state(state_path)
        body = vexer.build_export(docs, state)
    except vexer.VexDirError as exc:
        print(f"streamproc: {exc}", file=sys.stderr)
        return exitcodes.USAGE
    if body is None:
        print(f"no changed VEX claims in {args.vex} since the last export")
        return 0
    print(f"export {body['exportId']}: {len(body['documents'])} documents, "
          f"{len(body['changedClaims'])} changed claims")  # fmt: skip
    if args.dry_run:
        print(json.dumps(body, indent=2))
        return 0
    save = _saver(state_path)
    sent = _send(
        args, "vexer", data_dir, body, save, sending_state(state, body), vexer.WEBHOOK_PATH
    )
    if sent != exitcodes.OK:
        return sent
    save(vexer.next_state(docs, body))
    return exitcodes.OK


def cmd_feedser_export(args: argparse.Namespace) -> int:
    data_dir = load({"data_dir": args.data_dir}, configuration(args)).data_dir
    state_path = args.state or data_dir / "feedser-export.json"
    try:
        db = AdvisoryDb.load(args.osv, args.kev, args.debian_sources, args.epss)
    except AdvisoryError as exc:
        print(f"streamproc: {exc}", file=sys.stderr)
        return exitcodes.USAGE
    state = load_state(state_path)
    body = build_export(db, state)
    if body is None:
        print("no new or changed advisories since the last export")
        return 0
    print(f"export {body['exportId']}: {len(body['advisories'])} advisories, "
          f"{len(body['changedProductKeys'])} product keys, KEV {body['kev']}")  # fmt: skip
    if args.dry_run:
        print(json.dumps(body, indent=2))
        return 0
    save = _saver(state_path)
    sent = _send(args, "feedser", data_dir, body, save, sending_state(state, body), WEBHOOK_PATH)
    if sent != exitcodes.OK:
        return sent
    save(next_state(db, body))
    return exitcodes.OK
