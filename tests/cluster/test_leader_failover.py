"""Fault (a): SIGKILL the event stream's leader while the gateway takes 5,000 signed Feedser
webhooks at a steady rate. Every export answered 2xx is in the stream and in the read model
exactly once; every other answer was a clear 503; nothing was stored that the sender does
not know about; the killed node catches up when it comes back."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from streamproc import roles
from streamproc.bus import jsapi
from streamproc.ids import derive_id
from streamproc.natsd.cluster import NatsCluster, move_leader, stream_leader, wait_stream_current
from streamproc.readmodel.exports import CF as EXPORTS_CF
from tests.cluster.system import export_counts
from tests.cluster.webhooks import REF, Delivery, Sender, summary
from tests.gateway.harness import default_settings, start, stop

pytestmark = pytest.mark.cluster

EXPORTS = 5000
RATE = 250.0
"""Exports per second: 20 s of steady load with the fault at 4 s."""
KILL_AFTER = 1000
TENANTS = ("acme", "globex")
"""The harness's Feedser source, configured to take no token, records each export once per
tenant it lists: 10,000 events, never half of a delivery's."""


async def test_kill_the_stream_leader_under_steady_webhook_load(
    cluster: NatsCluster, tmp_path: Path, prefix: str
) -> None:
    settings = default_settings(tmp_path, tokenless=True, access_log="off")
    gw = await start(tmp_path, cluster.url, prefix, settings)
    sender = Sender(gw.url)
    try:
        nc = gw.system.nc
        assert nc is not None and nc.connected_url is not None
        stream = gw.system.settings.events_stream
        # The harshest case: the leader is the very server the gateway is connected to, so
        # the kill drops the gateway's connection and the stream's leader at once.
        here = next(n for n in cluster.nodes if n.ports.client == nc.connected_url.port)
        await move_leader(nc, stream, here.name)
        ids = [f"x{i:05d}" for i in range(EXPORTS)]
        load = asyncio.create_task(sender.steady(ids, RATE))
        while len(sender.deliveries) < KILL_AFTER:
            await asyncio.sleep(0.01)
        killed_at = time.monotonic()
        cluster.kill(here.name)
        deliveries = await load
        figures = summary(deliveries, killed_at)
        print(f"\nleader failover under load (killed {here.name}): {figures}")

        assert nc.is_connected and nc.connected_url.port != here.ports.client
        new_leader = await stream_leader(nc, stream)
        assert new_leader not in (None, here.name)
        check_answers(deliveries)
        acked = [d for d in deliveries if d.acknowledged]
        assert figures["answers_5xx"] > 0, "the kill must land in the middle of the load"
        assert len(acked) >= EXPORTS * 0.99, figures

        counts = await export_counts(nc, stream)
        sent = {d.export_id for d in deliveries}
        stored = {ref.removeprefix(REF) for _, ref in counts}
        assert stored <= sent, "an event the sender never sent"
        assert set(counts.values()) == {1}, "an export stored twice"
        for d in acked:
            for tenant in TENANTS:
                assert (tenant, REF + d.export_id) in counts
        info = await jsapi.stream_info(nc, stream)
        assert info is not None and info.state.messages == len(counts)

        # The read model holds each stored export once, at the sequence the sender was told.
        await gw.system.projectors["gateway-test"].wait_for(info.state.last_seq, 30)
        rm = gw.gateway.rm
        for d in acked:
            told = {e["tenant"]: e["seq"] for e in d.final.body["events"]}
            for tenant in TENANTS:
                rec = rm.export(tenant, "feedser", REF + d.export_id)
                assert rec is not None and rec.seq == told[tenant]
                assert rec.event_id == derive_id("feedser-main", d.export_id, tenant)
        in_rm = sum(1 for _ in gw.system.stores[0].scan(EXPORTS_CF))
        assert in_rm == len(counts)

        # The killed node comes back and catches up with what was written without it.
        await asyncio.to_thread(cluster.start_node, here.name)
        await wait_stream_current(nc, stream, timeout=30)
    finally:
        await sender.close()
        await stop(gw)
        roles.ROLES.pop("gateway-test", None)


def check_answers(deliveries: list[Delivery]) -> None:
    """Only 2xx and clear 503s (a problem document saying retrying is safe) were answered."""
    for d in deliveries:
        for a in d.attempts:
            if a.status >= 500:
                assert a.status == 503, (d.export_id, a.status, a.body)
                # the replay look-up (KV) or the log: both live on the cluster, both say retry
                assert a.body["type"].endswith(("replay-check-unavailable", "log-unavailable")), (
                    a.body
                )
                assert "retrying is safe" in a.body["detail"]
            elif a is d.final and d.recorded_earlier:
                continue  # the resend of an attempt whose answer was lost: recorded then
            else:
                assert a.status in (200, 202), (d.export_id, a.status, a.body)
        if d.acknowledged and not d.recorded_earlier:
            events = d.final.body["events"]
            assert sorted(e["tenant"] for e in events) == sorted(TENANTS)
