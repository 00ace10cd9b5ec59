"""The chain verification route on a bare aiohttp app, over real loopback HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from streamproc.audit.http import VERIFY_PATH, add_chain_routes, verify_response
from streamproc.bus.server import free_port
from streamproc.state.store import RocksStore
from tests.audit.helpers import keyring
from tests.audit.test_tamper import change_digest, delete_log_row


def only_acme(request: web.Request, tenant: str) -> None:
    """Stands in for the gateway's authorisation of the caller's tenant."""
    if tenant != "acme":
        raise web.HTTPForbidden(text="not your tenant")


async def serve(state: Path) -> tuple[web.AppRunner, str]:
    app = web.Application()
    add_chain_routes(app, state, keyring, authorize=only_acme)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, f"http://127.0.0.1:{port}{VERIFY_PATH}"


@pytest.fixture
async def client() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def test_verify_route(client: aiohttp.ClientSession, auditor_copy: Path) -> None:
    runner, url = await serve(auditor_copy)
    try:
        async with client.get(url, params={"tenantId": "acme"}) as r:
            assert r.status == 200
            body = await r.json()
        assert body["tenantId"] == "acme" and body["verified"] is True
        assert (body["entries"], body["snapshots"], body["snapshotted"]) == (230, 4, 200)
        assert body["broken_position"] is None

        for params, status, code in [
            ({}, 400, "invalid_tenant"),
            ({"tenantId": "Not/A/Tenant"}, 400, "invalid_tenant"),
        ]:
            async with client.get(url, params=params) as r:
                assert r.status == status
                assert (await r.json())["error"] == code
        async with client.get(url, params={"tenantId": "beta"}) as r:
            assert r.status == 403  # refused by the mounting application's authorisation

        store = RocksStore(auditor_copy)  # tamper with the derived log view only
        store.commit(delete_log_row(store))
        store.close()
        async with client.get(url, params={"tenantId": "acme"}) as r:
            assert (await r.json())["verified"] is True  # the chain itself is intact
        async with client.get(url, params={"tenantId": "acme", "logView": "true"}) as r:
            body = await r.json()
        assert (body["verified"], body["broken_position"], body["field"]) == (
            False,
            55,
            "log_index",
        )

        store = RocksStore(auditor_copy)  # tamper while the server is up
        store.commit(change_digest(store))
        store.close()
        async with client.get(url, params={"tenantId": "acme"}) as r:
            assert r.status == 200
            body = await r.json()
        assert body["verified"] is False
        assert (body["broken_position"], body["field"]) == (120, "payload_digest")
        assert body["reason"].startswith("position 120:")
    finally:
        await runner.cleanup()


async def test_unknown_tenant_and_no_state_yet(
    client: aiohttp.ClientSession, tmp_path: Path, auditor_copy: Path
) -> None:
    assert (await verify_response(auditor_copy, keyring(), "nobody")).status == 404
    runner, url = await serve(tmp_path / "missing")
    try:
        async with client.get(url, params={"tenantId": "acme"}) as r:
            assert r.status == 503
            assert (await r.json())["error"] == "no_audit_state"
    finally:
        await runner.cleanup()
