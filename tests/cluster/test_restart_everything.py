"""Fault (b): SIGKILL every process — gateway, planner, runner, auditor, activity, the
scanner — and the NATS node leading the event stream, all at once, while Feedser exports
keep arriving; then start them again the way systemd would (and restart whatever exits with
an error). The system comes back by itself, every projector resumes from its checkpoint, every
run completes, and each role's state digest equals a clean replay's."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path

import aiohttp
import pytest

from streamproc.bus import streams
from streamproc.bus.connect import connect
from streamproc.bus.publisher import Publisher
from streamproc.config import Configuration
from streamproc.events.envelope import new_event
from streamproc.hlc import wall_ms
from streamproc.ids import derive_id
from streamproc.natsd.cluster import NatsCluster, stream_leader, wait_stream_current
from streamproc.natsd.server import free_port
from streamproc.roles import rebuild
from streamproc.scanner.demo import DATA, _image_event
from streamproc.state.digest import state_digest
from streamproc.state.store import RocksStore
from tests.cluster.processes import RoleProcess, clean_env, gateway_config, wait_ready
from tests.cluster.system import (
    Installation,
    Supervisor,
    projector_starts,
    read_events,
    wait_for,
)
from tests.cluster.webhooks import Sender, summary
from tests.gateway.harness import BASE, token

pytestmark = pytest.mark.cluster

TENANT = "acme"
EXPORTS = 48
RATE = 6.0
KILL_AFTER = 16
ROLES = ("gateway", "planner", "runner", "auditor", "activity")


async def seed_images(url: str, prefix: str) -> list[str]:
    """The indexer's part: the test SBOMs as ``image.indexed``; returns product keys that
    are in at least one image (what the exports below name)."""
    nc = await connect(url)
    keys: set[str] = set()
    try:
        async with Publisher(nc, prefix=prefix) as pub:
            for path in sorted((DATA / "sboms").glob("*.json")):
                digest, payload = _image_event(TENANT, path.name, path.read_bytes())
                keys.update(c.product_key for c in payload.components)
                event = new_event("image.indexed", TENANT, payload, f"{wall_ms()}:0:test",
                                  event_id=derive_id("seed", TENANT, digest))  # fmt: skip
                await pub.publish_event(event)
    finally:
        await nc.close()
    return sorted(keys)


async def test_restart_every_process_and_a_nats_node_at_once(
    cluster: NatsCluster, tmp_path: Path, prefix: str
) -> None:
    env = clean_env(
        STREAMPROC_GATEWAY_CONFIG=str(gateway_config(tmp_path / "gw", (TENANT,))),
        STREAMPROC_PLANNER_DEBOUNCE_S="0",
        STREAMPROC_LEASE_TTL_S="1.5",
        STREAMPROC_RUNNER_ACK_WAIT_S="2",
        STREAMPROC_AUDIT_BATCH_SIZE="25",
        STREAMPROC_AUDIT_BATCH_INTERVAL_S="1",
    )
    scanner_port = free_port()
    scanner_url = f"http://127.0.0.1:{scanner_port}"
    scanner = RoleProcess(
        "scanner",
        ["scanner", "--port", str(scanner_port), "--osv", str(DATA / "osv"),
         "--kev", str(DATA / "kev.json"), "--debian-sources",
         str(DATA / "osv" / "debian-sources.json"), "--nats-url", cluster.url,
         "--prefix", prefix, "--data-dir", str(tmp_path / "scanner"), "--node-id", "scanner"],
        env, tmp_path / "logs" / "scanner.log",
    )  # fmt: skip
    system = Installation(tmp_path, cluster.url, prefix, env)
    for role in ROLES:
        extra = ("--scanner-url", scanner_url) if role == "runner" else ()
        system.add(role, role, *extra)
    scanner.start()
    system.start()
    sender = Sender(system.http("gateway"))
    supervisor = Supervisor({**system.procs, "scanner": scanner})
    try:
        for name in ROLES:
            await wait_ready(system.procs[name], system.http(name))
        keys = await seed_images(cluster.url, prefix)
        async with aiohttp.ClientSession() as http:
            schedule = {"id": "on-feedser", "name": "on feedser", "whenCron": "0 2 * * *",
                        "timezone": "UTC"}  # fmt: skip
            headers = {"Authorization": f"Bearer {token(TENANT)}"}
            async with http.post(f"{system.http('gateway')}{BASE}/schedules?wait=true",
                                 json=schedule, headers=headers) as r:  # fmt: skip
                assert r.status == 201, await r.text()

        nc = await connect(cluster.url)
        stream = streams.stream_names(prefix)[0]
        with supervisor:
            ids = [f"e{i:03d}" for i in range(EXPORTS)]
            load = asyncio.create_task(sender.steady(ids, RATE, keys=keys))
            await wait_for(
                lambda: asyncio.sleep(0, len(sender.deliveries) >= KILL_AFTER), 60, "exports"
            )
            victim = await stream_leader(nc, stream)
            assert victim is not None
            killed_at = time.monotonic()
            system.kill()
            scanner.kill()
            cluster.kill(victim)
            checkpoints = {name: system.checkpoint(name) for name in ROLES}
            assert all(cp is not None and cp.last_seq > 0 for cp in checkpoints.values())
            cluster.start_node(victim)
            scanner.start()
            system.start()

            for name in ROLES:
                await wait_ready(system.procs[name], system.http(name), 90, supervised=True)
            back_after = time.monotonic() - killed_at
            deliveries = await load
            figures = summary(deliveries, killed_at)
            assert all(d.acknowledged for d in deliveries), figures

            # Every projector resumed where its checkpoint said, not from the beginning.
            starts = await projector_starts(nc, stream)
            for name in ROLES:
                (start,) = [s for c, s in starts.items() if c.startswith(f"proj_{name}_{name}_")]
                cp = checkpoints[name]
                assert cp is not None and start > 1
                if not supervisor.restarts.get(name):
                    assert start == cp.last_seq + 1, (name, start, cp)

            async def runs_done() -> bool:
                evs = [e for _, e in await read_events(nc, stream)]
                kinds = Counter(e.kind for e in evs)
                requested = {e.payload.run_id for e in evs if e.kind == "run.requested"}
                completed = {e.payload.run_id for e in evs if e.kind == "run.completed"}
                return kinds["export.feedser"] == EXPORTS and requested == completed != set()

            await wait_for(runs_done, 60, "every run completed", every=0.5)
            await wait_stream_current(nc, stream)
            await quiesce(system, nc, stream)
        print(
            f"\nrestart everything (killed {victim} and {len(ROLES) + 1} processes): back and "
            f"ready after {back_after:.1f} s; supervisor restarts {supervisor.restarts}; "
            f"exports {figures}"
        )
        codes = system.stop()
        assert codes == dict.fromkeys(ROLES, 0), {n: system.procs[n].tail() for n in ROLES}

        for name in ROLES:  # the live states equal clean replays of the same log
            live = RocksStore(system.state_dir(name), read_only=True)
            try:
                digest = state_digest(live)
            finally:
                live.close()
            fresh = await rebuild(
                nc,
                stream,
                name,
                tmp_path / "replay" / name,
                progress=False,
                configuration=Configuration(),
            )
            assert fresh.digest == digest, name
        await nc.close()
    finally:
        await sender.close()
        system.stop()
        scanner.stop()


async def quiesce(system: Installation, nc: object, stream: str) -> None:
    """Until the log stops growing and every role has applied all of it."""
    from streamproc.bus import jsapi

    async def settled() -> bool:
        info = await jsapi.stream_info(nc, stream)  # type: ignore[arg-type]
        assert info is not None
        await asyncio.sleep(1.0)
        again = await jsapi.stream_info(nc, stream)  # type: ignore[arg-type]
        assert again is not None
        if again.state.last_seq != info.state.last_seq:
            return False
        async with aiohttp.ClientSession() as http:
            for name in ROLES:
                async with http.get(f"{system.http(name)}/readyz") as r:
                    doc = await r.json()
                    if r.status != 200 or any(doc.get("lag", {}).values()):
                        return False
        return True

    await wait_for(settled, 60, "quiet log, every role caught up")
