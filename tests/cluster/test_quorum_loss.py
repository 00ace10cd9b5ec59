"""Quorum loss: two of three NATS nodes down. The gateway refuses writes with a clear 503
within seconds (it never stores what it did not acknowledge), keeps answering reads from its
read model, reports not ready (503, not a 500) — and takes writes again once a second node
is back."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from streamproc import roles
from streamproc.natsd.cluster import NatsCluster
from tests.cluster.system import export_counts
from tests.cluster.webhooks import FEEDSER, REF, export_body
from tests.gateway.harness import BASE, default_settings, signed_headers, start, stop, token

pytestmark = pytest.mark.cluster


async def test_writes_stop_with_a_clear_503_and_resume_with_quorum(
    cluster: NatsCluster, tmp_path: Path, prefix: str
) -> None:
    # A source that takes no token records each export for both its tenants: one delivery,
    # two events, neither stored twice nor half.
    settings = default_settings(tmp_path, tokenless=True, access_log="off")
    gw = await start(tmp_path, cluster.url, prefix, settings)
    try:
        nc = gw.system.nc
        assert nc is not None and nc.connected_url is not None

        async def post(export_id: str) -> tuple[int, dict[str, str], float]:
            body = export_body(export_id)
            t0 = time.monotonic()
            status, problem, _ = await gw.call(
                "POST", FEEDSER, data=body, headers=signed_headers(body, delivery=export_id)
            )
            return status, problem, time.monotonic() - t0

        assert (await post("before"))[0] == 202
        down = [n for n in cluster.nodes if n.ports.client != nc.connected_url.port]
        for node in down:
            cluster.kill(node.name)

        status, problem, took = await post("no-quorum")
        assert status == 503, problem  # the replay look-up or the log: either says retry
        assert problem["type"].endswith(("replay-check-unavailable", "log-unavailable")), problem
        assert took < 10, f"a write without quorum took {took:.1f} s to be refused"
        auth = {"Authorization": f"Bearer {token()}"}
        status, _, _ = await gw.call("GET", f"{BASE}/schedules", headers=auth)
        assert status == 200, "reads are answered from the read model"
        # Without a quorum the stream info first times out, then (~10 s) a follower answers
        # it without a leader: /readyz is 503 either way.
        for _ in range(40):
            status, detail, _ = await gw.call("GET", "/readyz")
            if status == 503:
                break
            await asyncio.sleep(0.5)
        assert status == 503 and "unavailable" in detail["stream"], detail

        cluster.start_node(down[0].name)  # two of three: quorum again
        back = time.monotonic()
        for _ in range(60):
            status, problem, _ = await post("no-quorum")  # the sender's retry, same delivery
            if status != 503:
                break
            await asyncio.sleep(0.5)  # a sender waits (Retry-After) before trying again
        print(f"\nquorum loss: writes accepted again {time.monotonic() - back:.1f} s after "
              f"the second server was started")  # fmt: skip
        # 202, or 200 "duplicate" when an attempt answered 503 was stored after all (its
        # publish ack was lost in the election): either way it is stored once (below).
        assert status == 202 or (status == 200 and problem.get("duplicate")), problem
        counts = await export_counts(nc, gw.system.settings.events_stream)
        assert set(counts.values()) == {1}, "an export stored twice"
        assert sorted(ref.removeprefix(REF) for _, ref in counts) == sorted(
            ["before", "before", "no-quorum", "no-quorum"]
        ), "one event per tenant and export: the refused attempt stored nothing extra"
        print(f"\nquorum loss: a write was refused (503) after {took:.1f} s")
    finally:
        await stop(gw)
        roles.ROLES.pop("gateway-test", None)
