"""The auditor's NATS service: chain verification of one tenant, from the auditor's state.

Each question opens a read-only, point-in-time view of the auditor's state directory in a
worker thread, so a long chain blocks neither the event loop nor the fold, and a chain being
appended to is verified up to the head it had when the view opened. A broken chain is an
answer (``verified: false`` and where), not an error. Every auditor instance answers — the
active one and the standbys (their chains are folded from the same log; verifying signs
nothing) — once caught up with the stream head as it was at start.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import msgspec
from nats.aio.client import Client

from streamproc.audit.dsse import Keyring
from streamproc.audit.layout import HEADS_CF
from streamproc.audit.signing import build_keyring
from streamproc.audit.verify import UnknownTenant, verify_tenant
from streamproc.bus import services
from streamproc.bus.services import Served, ServiceFailure
from streamproc.queries import AUDITOR, VERIFY, ChainVerification, VerifyQuery, read_query
from streamproc.reactor import RoleContext
from streamproc.state.store import RocksStore

_query = msgspec.json.Decoder(VerifyQuery)
_encode = msgspec.json.Encoder().encode


def verify(
    state_dir: Path, keyring: Callable[[], Keyring], tenant: str, log_view: bool
) -> ChainVerification:
    """Verify ``tenant``'s chain in a read-only view of ``state_dir`` (blocking)."""
    try:
        store = RocksStore(state_dir, read_only=True)
    except FileNotFoundError as exc:
        raise ServiceFailure(
            503, "no-audit-state", f"auditor state is not available: {exc}"
        ) from None
    try:
        if HEADS_CF not in store.families():
            raise UnknownTenant(f"no audit chain for tenant {tenant!r}")
        return verify_tenant(store, tenant, keyring(), log_view=log_view)
    except UnknownTenant as exc:
        raise ServiceFailure(404, "not-found", str(exc)) from None
    finally:
        store.close()


async def serve_verification(
    nc: Client, prefix: str, state_dir: Path, keyring: Callable[[], Keyring], *, node: str = ""
) -> Served:
    """``keyring()`` is read per question, so trusted keys changed on disk count at once."""

    async def answer(data: bytes) -> bytes:
        query = read_query(_query, data)
        report = await asyncio.to_thread(verify, state_dir, keyring, query.tenant, query.log_view)
        return _encode(report)

    return await services.serve(
        nc,
        prefix,
        AUDITOR,
        {VERIFY: answer},
        description="audit chain verification from the auditor's state",
        metadata={"node": node},
    )


async def start(ctx: RoleContext) -> Served:
    """The ``services`` hook of the auditor role."""
    s = ctx.settings
    return await serve_verification(
        ctx.publisher.nc,
        s.prefix,
        s.state_dir(ctx.role),
        lambda: build_keyring(s.data_dir),
        node=s.node_id,
    )
