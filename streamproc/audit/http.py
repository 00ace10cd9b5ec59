"""``GET /api/v1/scheduler/chain/verify?tenantId=T[&logView=true]`` for the gateway to mount.

Verification reads the auditor's state through a read-only, point-in-time view opened per
request in a worker thread, so a long chain blocks neither the event loop nor the auditor.
A broken chain is a successful request whose answer is ``"verified": false`` with the first
broken position; 4xx/5xx are for requests that could not be answered. Authentication and
tenant authorisation belong to whoever mounts the route: pass ``authorize``, or call
:func:`verify_response` from an operation of your own.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from pathlib import Path

import msgspec
from aiohttp import web

from streamproc.audit.dsse import Keyring
from streamproc.audit.layout import HEADS_CF
from streamproc.audit.verify import UnknownTenant, verify_tenant
from streamproc.ids import InvalidTenant, validate_tenant
from streamproc.state.store import RocksStore, Store

VERIFY_PATH = "/api/v1/scheduler/chain/verify"

StoreOpener = Callable[[], Store]
KeyringSource = Keyring | Callable[[], Keyring]
Authorize = Callable[[web.Request, str], Awaitable[None] | None]
"""Called with the request and the tenant asked for; raise an ``web.HTTPException`` to deny."""


def read_only_opener(state_dir: Path) -> StoreOpener:
    """Open the auditor's state directory read-only (works beside the running auditor)."""

    def open_store() -> Store:
        return RocksStore(state_dir, read_only=True)

    return open_store


def _error(status: int, code: str, message: str) -> web.Response:
    return web.json_response({"error": code, "message": message}, status=status)


def _verify(opener: StoreOpener, keyring: KeyringSource, tenant: str, log_view: bool) -> object:
    ring = keyring() if callable(keyring) else keyring
    store = opener()
    try:
        if HEADS_CF not in store.families():
            raise UnknownTenant(f"no audit chain for tenant {tenant!r}")
        report = verify_tenant(store, tenant, ring, log_view=log_view)
    finally:
        store.close()
    doc = msgspec.to_builtins(report)
    return {"tenantId": doc.pop("tenant"), "verified": doc.pop("ok"), **doc}


async def verify_response(
    open_store: StoreOpener | Path, keyring: KeyringSource, tenant: str, log_view: bool = False
) -> web.Response:
    """The route's answer for an already authorised ``tenant``."""
    opener = read_only_opener(open_store) if isinstance(open_store, Path) else open_store
    try:
        validate_tenant(tenant)
    except InvalidTenant as exc:
        return _error(400, "invalid_tenant", str(exc))
    try:
        body = await asyncio.to_thread(_verify, opener, keyring, tenant, log_view)
    except UnknownTenant as exc:
        return _error(404, "unknown_tenant", str(exc))
    except FileNotFoundError as exc:
        return _error(503, "no_audit_state", f"auditor state is not available: {exc}")
    return web.json_response(body)


def add_chain_routes(
    app: web.Application,
    open_store: StoreOpener | Path,
    keyring: KeyringSource,
    *,
    authorize: Authorize | None = None,
) -> None:
    """Mount the chain routes; ``open_store`` is a state directory or an opener, ``keyring``
    the trusted keys (or a callable returning them, for keys reloaded at runtime)."""

    async def verify(request: web.Request) -> web.Response:
        tenant = request.query.get("tenantId", "")
        try:
            validate_tenant(tenant)
        except InvalidTenant as exc:
            return _error(400, "invalid_tenant", str(exc))
        if authorize is not None:
            outcome = authorize(request, tenant)
            if inspect.isawaitable(outcome):
                await outcome
        log_view = request.query.get("logView", "").lower() in ("1", "true", "yes")
        return await verify_response(open_store, keyring, tenant, log_view)

    app.router.add_get(VERIFY_PATH, verify)
