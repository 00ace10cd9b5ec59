"""``streamproc chain …`` and ``streamproc bundle …``: verify, prove, inspect, merge offline.

Exit codes: 0 ok, 1 verification failed (or a bundle/proof was refused), 2 usage or
configuration error. Commands that read state open the auditor's state directory read-only,
which works beside a running auditor. Mounted by :func:`register`; also runnable on its own
as ``python -m streamproc.audit.cli``.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterator
from itertools import islice
from pathlib import Path
from typing import Any

import msgspec

from streamproc import exitcodes
from streamproc.audit import bundle_commands
from streamproc.audit.common import (
    UsageError,
    keyring_from_args,
    open_state,
    settings_from_args,
    state_dir,
)
from streamproc.audit.entry import entry_encoder
from streamproc.audit.held import held_view
from streamproc.audit.layout import entry_at, iter_entries, log_view, read_head, tenants
from streamproc.audit.proofs import ProofError, decode_proof, encode_proof, prove, verify_proof
from streamproc.audit.settings import from_sections as audit_settings
from streamproc.audit.verify import UnknownTenant, verify_tenant
from streamproc.cliargs import common as _common
from streamproc.configfile.loader import activate
from streamproc.hlc import wall_ms
from streamproc.ids import InvalidTenant, validate_tenant


def _tenant(value: str) -> str:
    try:
        return validate_tenant(value)
    except InvalidTenant as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _json(obj: object) -> None:
    sys.stdout.write(msgspec.json.format(msgspec.json.encode(obj), indent=2).decode() + "\n")


# ---------------------------------------------------------------------- chain


def cmd_verify(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    keyring = keyring_from_args(args, settings)
    path = state_dir(args, settings)
    with open_state(path, settings) as store:
        names = [args.tenant] if args.tenant else tenants(store)
        if not names:
            print("no audit chains in this state directory")
            return exitcodes.OK
        reports = []
        for tenant in names:
            try:
                reports.append(
                    verify_tenant(
                        store,
                        tenant,
                        keyring,
                        count_metrics=False,
                        workers=args.workers,
                        path=path,
                        log_view=args.log_view,
                    )
                )
            except UnknownTenant as exc:
                raise UsageError(str(exc)) from None
    if len(keyring) == 0 and any(r.snapshotted for r in reports):
        raise UsageError(
            "no trusted keys to check snapshot signatures: pass --trusted-key, set "
            "STREAMPROC_AUDIT_TRUSTED_KEYS, or run where the auditor's key is (--data-dir)"
        )
    if args.json:
        _json(reports)
    else:
        for r in reports:
            if r.ok:
                print(
                    f"{r.tenant}: OK — {r.entries} entries, {r.snapshots} signed snapshots "
                    f"covering {r.snapshotted}; head {r.head_chain_link} at {r.head_hlc}"
                )
            else:
                print(f"{r.tenant}: BROKEN — {r.reason}")
                print(f"  field {r.field}: expected {r.expected}, found {r.found}")
    return exitcodes.OK if all(r.ok for r in reports) else exitcodes.FAILED


def cmd_prove(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    with open_state(state_dir(args, settings), settings) as store:
        try:
            proof = prove(store, args.tenant, args.entry)
        except ProofError as exc:
            print(f"streamproc: {exc}", file=sys.stderr)
            return exitcodes.FAILED if exc.not_yet else exitcodes.USAGE
    data = encode_proof(proof)
    if args.out:
        Path(args.out).write_bytes(data)
        print(
            f"wrote {args.out}: entry {proof.entry.position}, "
            f"leaf {proof.index} of {proof.batch_size}"
        )
    else:
        sys.stdout.write(data.decode())
    return exitcodes.OK


def cmd_verify_proof(args: argparse.Namespace) -> int:
    try:
        data = Path(args.file).read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read {args.file}: {exc.strerror}") from None
    try:
        proof = decode_proof(data)
    except msgspec.DecodeError as exc:
        print(f"streamproc: {args.file} is not an inclusion proof: {exc}", file=sys.stderr)
        return exitcodes.FAILED
    keyring = keyring_from_args(args, settings_from_args(args))
    if len(keyring) == 0:
        raise UsageError("no trusted keys: pass --trusted-key BASE64 (or keyid=BASE64)")
    check = verify_proof(proof, keyring)
    e = proof.entry
    if check.ok:
        assert check.body is not None
        print(
            f"OK: entry {e.position} of tenant {proof.tenant} ({e.kind} {e.action} {e.job_id} "
            f"at {e.t_hlc}) is leaf {proof.index} of the {check.body.entry_count}-entry batch "
            f"{check.body.from_position}..{check.body.to_position}, root "
            f"{check.body.merkle_root}, signed by {check.key_id}"
        )
        return exitcodes.OK
    print(f"FAILED: {check.reason}")
    return exitcodes.FAILED


def cmd_held(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    skew = audit_settings(settings, settings.configuration.sections).max_clock_skew_ms
    now = wall_ms()
    with open_state(state_dir(args, settings), settings) as store:
        names = [args.tenant] if args.tenant else tenants(store)
        views = [v for v in (held_view(store, t, now, skew) for t in names) if v is not None]
    if args.tenant and not views:
        raise UsageError(f"no audit chain for tenant {args.tenant!r}")
    if args.json:
        _json(views)
        return exitcodes.OK
    for v in views:
        if not v.held:
            print(f"{v.tenant}: nothing held ({v.attested} of {v.entries} entries attested)")
            continue
        print(
            f"{v.tenant}: {len(v.held)} entries held for clock skew (> {v.max_clock_skew_ms} ms "
            f"ahead); {v.waiting} entries wait behind position {v.held[0].position}"
        )
        for h in v.held:
            print(
                f"  position {h.position}  {h.t_hlc}  {h.ahead_ms} ms ahead  {h.kind} "
                f"{h.action} {h.job_id}  event {h.event_id}"
            )
    return exitcodes.OK


def cmd_log(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    with open_state(state_dir(args, settings), settings) as store:
        if read_head(store, args.tenant) is None:
            raise UsageError(f"no audit chain for tenant {args.tenant!r}")
        if args.order == "chain":
            entries: Iterator[Any] = iter_entries(store, args.tenant)
        else:
            entries = (
                entry_at(store, args.tenant, i.position) for i in log_view(store, args.tenant)
            )
        out = sys.stdout
        for e in islice(entries, args.limit):
            out.write(entry_encoder.encode(msgspec.structs.asdict(e)).decode() + "\n")
    return exitcodes.OK


# ---------------------------------------------------------------------- parser


def _state_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--state-dir", help="auditor state directory (default DATA/state/auditor)")


def _keys_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--trusted-key",
        action="append",
        metavar="[KEYID=]BASE64",
        help="trust this Ed25519 public key (repeatable; adds to STREAMPROC_AUDIT_TRUSTED_KEYS)",
    )


def register(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
    common: Callable[[argparse.ArgumentParser], None],
) -> None:
    """Add ``chain verify|prove|verify-proof|held|log`` and ``bundle export|import``."""
    chain = subparsers.add_parser("chain", help="the tenant audit hash chains")
    csub = chain.add_subparsers(dest="chain_command", required=True)

    p = csub.add_parser("verify", help="recompute every link, index and snapshot; exit 1 if broken")
    common(p)
    _state_arg(p)
    _keys_arg(p)
    p.add_argument("--tenant", type=_tenant, help="only this tenant (default: all)")
    p.add_argument("--json", action="store_true", help="print the reports as JSON")
    p.add_argument(
        "--workers",
        type=int,
        default=min(os.cpu_count() or 1, 4),
        help="processes for chains of 200,000+ entries (default: the CPU count, at most 4)",
    )
    p.add_argument(
        "--log-view",
        action="store_true",
        help="also check the HLC-ordered log view (a derived index) against the chain",
    )
    p.set_defaults(fn=_guarded(cmd_verify))

    p = csub.add_parser("prove", help="print the inclusion proof of one entry (JSON)")
    common(p)
    _state_arg(p)
    p.add_argument("--tenant", type=_tenant, required=True)
    p.add_argument("--entry", required=True, metavar="LINK", help="the entry's chain link")
    p.add_argument("--out", help="write the proof to this file instead of stdout")
    p.set_defaults(fn=_guarded(cmd_prove))

    p = csub.add_parser("verify-proof", help="check an inclusion proof offline")
    common(p)
    _keys_arg(p)
    p.add_argument("file")
    p.set_defaults(fn=_guarded(cmd_verify_proof))

    p = csub.add_parser("held", help="entries held back for clock skew")
    common(p)
    _state_arg(p)
    p.add_argument("--tenant", type=_tenant, help="only this tenant (default: all)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=_guarded(cmd_held))

    p = csub.add_parser("log", help="a tenant's entries as JSON lines, in HLC or chain order")
    common(p)
    _state_arg(p)
    p.add_argument("--tenant", type=_tenant, required=True)
    p.add_argument("--order", choices=("hlc", "chain"), default="hlc")
    p.add_argument("--limit", type=int, default=None)
    p.set_defaults(fn=_guarded(cmd_log))

    bundle = subparsers.add_parser("bundle", help="offline merge: export and import bundles")
    bsub = bundle.add_subparsers(dest="bundle_command", required=True)
    p = bsub.add_parser("export", help="write a tenant's events as a signed bundle")
    common(p)
    _state_arg(p)
    p.add_argument("--tenant", type=_tenant, required=True)
    p.add_argument("--since", metavar="HLC", help="only events after this HLC")
    p.add_argument("--out", required=True)
    p.set_defaults(fn=_guarded(bundle_commands.cmd_bundle_export))
    p = bsub.add_parser("import", help="verify a bundle and publish its missing events")
    common(p)
    _keys_arg(p)
    p.add_argument("file")
    p.set_defaults(fn=_guarded(bundle_commands.cmd_bundle_import))


Command = Callable[[argparse.Namespace], int]


def _guarded(fn: Command) -> Command:
    """Usage, configuration and connection problems become a message and their exit code
    (:mod:`streamproc.exitcodes`), however the command is invoked (``streamproc`` or this
    module)."""
    return exitcodes.guarded(fn)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="streamproc", description="audit chain commands")
    register(parser.add_subparsers(dest="command", required=True), _common)
    args = parser.parse_args(argv)

    def command(args: argparse.Namespace) -> int:
        args.configuration = activate(args.config)  # as `streamproc audit` does
        return int(args.fn(args))

    return exitcodes.guarded(command)(args)


if __name__ == "__main__":
    sys.exit(main())
