"""Two tenants by every route: one tenant's token never reads, lists, edits, previews or
cancels another's resources (404, not 403), and a refused request publishes nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from streamproc.natsd.server import EmbeddedNats
from tests.gateway.api.test_preview import INDEX, FakeIndex
from tests.gateway.conftest import drop_streams
from tests.gateway.harness import (
    BASE,
    Harness,
    default_settings,
    signed_headers,
    start,
    stop,
    token,
)

S = f"{BASE}/schedules"
NEW = {"name": "n", "whenCron": "0 3 * * *", "timezone": "America/New_York"}


async def seed(h: Harness, tenant: str, sid: str) -> tuple[str, str]:
    status, sched, _ = await h.call(
        "POST", f"{S}?wait=true", tok=token(tenant), json={**NEW, "id": sid}
    )
    assert status == 201
    status, run, _ = await h.call("POST", f"{BASE}/run?wait=true", tok=token(tenant), json={})
    assert status == 201
    return sched["id"], run["id"]


@pytest.mark.parametrize(("me", "them"), [("acme", "globex"), ("globex", "acme")])
async def test_tenant_matrix(
    tmp_path: Path, nats_server: EmbeddedNats, prefix: str, me: str, them: str
) -> None:
    index = FakeIndex(INDEX)
    h = await start(tmp_path, nats_server.url, prefix, default_settings(tmp_path), impact=index)
    try:
        mine = await seed(h, me, "sched-1")
        theirs = await seed(h, them, "sched-2")
        tok = token(me)
        seq = await h.last_seq()
        # Reads, edits and cancels of the other tenant's resources: 404, nothing published.
        refused = [
            ("GET", f"{S}/{theirs[0]}", None),
            ("PATCH", f"{S}/{theirs[0]}", {"name": "hijack"}),
            ("PATCH", f"{S}/{theirs[0]}", {"paused": True}),
            ("DELETE", f"{S}/{theirs[0]}", None),
            ("GET", f"{BASE}/runs/{theirs[1]}", None),
            ("GET", f"{BASE}/runs/{theirs[1]}/deltas", None),
            ("POST", f"{BASE}/runs/{theirs[1]}/cancel", None),
        ]
        for method, path, body in refused:
            status, problem, _ = await h.call(method, path, tok=tok, json=body)
            assert status == 404, (me, method, path, problem)
            assert them not in problem["detail"]
        assert await h.last_seq() == seq
        # Listings show only the caller's own resources.
        _, scheds, _ = await h.call("GET", f"{S}?includeDeleted=true", tok=tok)
        assert [s["id"] for s in scheds["items"]] == [mine[0]]
        _, runs, _ = await h.call("GET", f"{BASE}/runs", tok=tok)
        assert [r["id"] for r in runs["items"]] == [mine[1]]
        # Ids are per tenant: the other tenant's id is free here, and theirs is untouched.
        status, _, _ = await h.call(
            "POST", f"{S}?wait=true", tok=tok, json={**NEW, "id": theirs[0]}
        )
        assert status == 201
        _, their_view, _ = await h.call("GET", f"{S}/{theirs[0]}", tok=token(them))
        assert their_view["name"] == "n" and their_view["tenantId"] == them
        # My own edits and cancels work, and only touch mine.
        status, _, _ = await h.call(
            "PATCH", f"{S}/{mine[0]}?wait=true", tok=tok, json={"name": "m"}
        )
        assert status == 200
        status, _, _ = await h.call("POST", f"{BASE}/runs/{mine[1]}/cancel?wait=true", tok=tok)
        assert status == 200
        _, their_run, _ = await h.call("GET", f"{BASE}/runs/{theirs[1]}", tok=token(them))
        assert their_run["cancelRequested"] is False
        # A preview only ever asks about the caller's tenant.
        status, res, _ = await h.call(
            "POST", f"{BASE}/preview/impact", tok=tok, json={"productKeys": ["pkg:deb/openssl"]}
        )
        assert status == 200 and res["count"] == len(INDEX[me])
        assert {sel.tenant for _, sel in index.calls} == {me}
        # Webhooks record exports only for the tenants of the source's allowlist.
        body = b'{"exportId":"iso-1","changedClaims":[]}'
        from tests.gateway.harness import VEXER_KEYS

        status, res, _ = await h.call(
            "POST",
            f"{BASE}/events/vexer-export",
            data=body,
            headers=signed_headers(body, scheme="ed25519", ed_key=VEXER_KEYS[0]),
        )
        assert status == 202 and [e["tenant"] for e in res["events"]] == ["acme"]
        # The OpenAPI document is public; everything else needs a token.
        status, _, _ = await h.call("GET", "/openapi.json")
        assert status == 200
    finally:
        await stop(h)
        await drop_streams(nats_server.url, prefix)
