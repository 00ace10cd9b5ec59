"""A role process killed (SIGKILL) under load and restarted at once: nothing it stamps is more
than the HLC reserve (1 s) ahead of the moment JetStream stored it, and an auditor folding
the whole log holds nothing back for clock skew."""

from __future__ import annotations

import asyncio
import signal
from datetime import UTC, datetime
from pathlib import Path

from streamproc.audit.held import held_positions
from streamproc.audit.layout import tenants
from streamproc.bus import direct
from streamproc.bus.fastclient import FastClient
from streamproc.bus.publisher import Publisher
from streamproc.config import Settings
from streamproc.events.envelope import decode
from streamproc.hlc import MAX_RESERVE_MS, Timestamp, wall_ms
from streamproc.natsd.server import EmbeddedNats, free_port
from streamproc.roles import System
from tests.role_helpers import (
    log_of,
    publish_export,
    publish_planner_inputs,
    start_role,
    stop,
    wait_for,
    wait_ready,
)

ENV = {"STREAMPROC_PLANNER_DEBOUNCE_S": "0", "STREAMPROC_PLANNER_SEGMENT_SIZE": "1"}


def stored_ms(stamp: str) -> int:
    """``Nats-Time-Stamp`` (RFC 3339, nanoseconds) as UTC milliseconds."""
    whole, _, frac = stamp.rstrip("Z").partition(".")
    dt = datetime.fromisoformat(whole).replace(tzinfo=UTC)
    return int(dt.timestamp() * 1000) + int((frac + "000")[:3])


async def test_a_planner_killed_under_load_never_stamps_ahead_after_its_restart(
    nats_server: EmbeddedNats,
    nc: FastClient,
    prefix: str,
    publisher: Publisher,
    stream_names: tuple[str, str, str],
    tmp_path: Path,
) -> None:
    events = stream_names[0]
    await publish_planner_inputs(publisher, 20)
    data, port = tmp_path / "planner", free_port()
    proc = start_role("planner", nats_server.url, prefix, data, port, **ENV)
    sent = 0

    async def load(n: int) -> None:
        nonlocal sent
        for _ in range(n):
            sent += 1
            await publish_export(publisher, f"x{sent}")
            await asyncio.sleep(0.02)

    async def planned(n: int) -> bool:
        got = await direct.scan(nc, events, f"{prefix}.events.*.run.*")
        return sum(1 for m in got if decode(m.data).kind == "run.planned") >= n

    try:
        await wait_ready(proc, port, data)
        await load(60)
        await wait_for(lambda: planned(30), 30, "the planner under load")
        proc.send_signal(signal.SIGKILL)  # mid-stream: exports keep coming
        await asyncio.gather(asyncio.to_thread(proc.wait), load(20))
        proc = start_role("planner", nats_server.url, prefix, data, port, **ENV)
        await wait_ready(proc, port, data)
        await load(40)
        await wait_for(lambda: planned(sent), 60, "every export planned")
    finally:
        assert stop(proc) == 0, log_of(data).read_text()[-2000:]

    ahead = []
    mine = 0
    for m in await direct.scan(nc, events, f"{prefix}.events.>", page=500):
        ts = Timestamp.parse(decode(m.data).hlc)
        if ts.node == "planner":
            mine += 1
            ahead.append(ts.physical - stored_ms(m.time))
    assert mine > 300
    assert max(ahead) <= MAX_RESERVE_MS, f"stamped {max(ahead)} ms ahead of its storing"

    settings = Settings(data_dir=tmp_path / "auditor", nats_url=nats_server.url, prefix=prefix,
                        node_id="auditor")  # fmt: skip
    auditor = System(settings, ["auditor"], http=False)
    await auditor.start()
    try:
        info = await nc.jetstream().stream_info(events)
        await auditor.projectors["auditor"].wait_for(info.state.last_seq, 30)
        store = auditor.stores[0]
        now = wall_ms()
        held = {t: held_positions(store, t, 0, now, settings.max_clock_skew_ms)
                for t in tenants(store)}  # fmt: skip
        assert held and all(v == [] for v in held.values()), held
    finally:
        await auditor.close()
