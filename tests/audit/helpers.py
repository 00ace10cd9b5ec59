"""Audit test helpers: deterministic chained events, keys, folding through the real runtime."""

from __future__ import annotations

from pathlib import Path

import msgspec
from nacl.signing import SigningKey

from streamproc.audit.bundle import read_tenant_messages
from streamproc.audit.dsse import Keyring, Signer
from streamproc.audit.entry import CHAINED_KINDS
from streamproc.audit.log import AuditLog
from streamproc.bus.fastclient import FastClient
from streamproc.bus.publisher import Publisher
from streamproc.config import Settings
from streamproc.events.envelope import Envelope, decode
from streamproc.hlc import HybridLogicalClock
from streamproc.runtime.projector import Projector
from streamproc.runtime.reactor import RoleContext
from streamproc.state.store import RocksStore, Store
from tests.samples import BASE_MS, sample_event

SEED = bytes(range(32))
KEY_ID = "test-auditor"


def signer(seed: bytes = SEED, key_id: str = KEY_ID) -> Signer:
    return Signer(key_id, SigningKey(seed))


def keyring(*signers: Signer) -> Keyring:
    return Keyring({s.key_id: s.signing_key.verify_key for s in signers or (signer(),)})


def chained_events(
    n: int,
    *,
    tenant: str = "acme",
    node: str = "n1",
    base_ms: int = BASE_MS,
    step_ms: int = 1,
    first: int = 0,
) -> list[Envelope]:
    """``n`` events of the chained kinds (every lifecycle and control-plane kind in turn),
    with HLCs ``base_ms + k*step_ms`` on ``node`` and ids unique per (tenant, node, k)."""
    out: list[Envelope] = []
    i = 0
    while len(out) < n:
        e = sample_event(i)
        i += 1
        if e.kind not in CHAINED_KINDS:
            continue
        k = first + len(out)
        out.append(
            msgspec.structs.replace(
                e,
                tenant=tenant,
                hlc=f"{base_ms + k * step_ms}:0:{node}",
                id=f"{tenant}.{node}.{k}",
                correlation_id=f"{tenant}.{node}.{k}",
            )
        )
    return out


async def fold(nc: FastClient, stream: str, path: Path, until: int) -> None:
    """Fold the event log up to ``until`` into the auditor state at ``path`` and close it."""
    store = RocksStore(path)
    try:
        proj = await Projector(nc, store, [AuditLog()], stream=stream, role="auditor").start()
        await proj.run(until_seq=until)
    finally:
        store.close()


def role_context(
    settings: Settings,
    store: Store,
    publisher: Publisher,
    clock: HybridLogicalClock,
    applied: int = 0,
) -> RoleContext:
    """A reactor context as the runtime builds it, without a running projector."""

    async def wait_for(seq: int, timeout: float) -> None:
        return None

    return RoleContext(
        role="auditor",
        settings=settings,
        store=store,
        publisher=publisher,
        clock=clock,
        applied=lambda: applied,
        wait_for=wait_for,
        lag=lambda: 0,
    )


async def snapshot_events(nc: FastClient, stream: str, prefix: str, tenant: str) -> list[Envelope]:
    """The ``audit.snapshot`` events of ``tenant`` on the event log, in stream order."""
    events = [decode(m) for m in await read_tenant_messages(nc, stream, prefix, tenant)]
    return [e for e in events if e.kind == "audit.snapshot"]
