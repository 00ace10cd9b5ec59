"""The production layout of docs/roles.md as processes, and ``make run``'s flow through it.

Every role is its own ``streamproc gateway|planner|runner|auditor`` process with its own data
directory and node id — two gateways behind one public origin (shared DPoP nonce secret),
one planner, one runner, one auditor — plus the reference scanner, against one NATS server
or the 3-node cluster. The flow: the demo catalog is indexed, a schedule subscribes to
Feedser, a DPoP-bound manual run is requested through gateway 1 and its proof replayed to
gateway 2 (refused), new advisories land and a signed Feedser export reaches gateway 1 and is
replayed to gateway 2 (refused); the planner is killed (SIGKILL) right after the export and
the runner in the middle of the runs, both started again; previews, chain verification and
Notify feed pages are read through both gateways. Both runs complete with exactly one verdict
per image and the demo's exact deltas.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from streamproc.bus import streams
from streamproc.bus.connect import connect
from streamproc.bus.fastclient import FastClient
from streamproc.bus.publisher import Publisher
from streamproc.events.envelope import Envelope, new_event
from streamproc.hlc import wall_ms
from streamproc.ids import derive_id
from streamproc.natsd.server import free_port
from streamproc.scanner.advisories import AdvisoryDb
from streamproc.scanner.demo import BASELINE, DATA, _image_event
from streamproc.scanner.feedser import WEBHOOK_PATH, build_export, signed_headers
from tests.cluster.processes import RoleProcess, clean_env, gateway_config, wait_ready
from tests.cluster.system import Installation, read_events
from tests.flows import EXPECTED_DELTAS, NEW_ADVISORIES, stream_messages
from tests.gateway.harness import BASE, HMAC_SECRET, dpop_jkt, dpop_proof, token
from tests.helpers import eventually

TENANT = "demo"
ORIGIN = "http://scheduler.test"
"""The gateways' public origin (``public_base_url``): DPoP proofs name it, not a replica."""
GATEWAYS = ("gateway-1", "gateway-2")
ROLES = {**dict.fromkeys(GATEWAYS, "gateway"), "planner": "planner", "runner": "runner",
         "auditor": "auditor"}  # fmt: skip


@dataclass
class Layout:
    system: Installation
    scanner: RoleProcess
    scanner_url: str
    osv_dir: Path
    nc: FastClient
    stream: str
    figures: dict[str, Any] = field(default_factory=dict)

    def gw(self, n: int) -> str:
        return self.system.http(GATEWAYS[n])

    async def events(self) -> list[Envelope]:
        return [e for _, e in await read_events(self.nc, self.stream)]


@asynccontextmanager
async def split_layout(tmp: Path, url: str, prefix: str) -> AsyncIterator[Layout]:
    """Start the scanner and every role process against ``url``; stop them all after."""
    config = gateway_config(
        tmp / "gw",
        (TENANT,),
        required_modes=["bearer", "dpop"],
        public_base_url=ORIGIN,
        dpop={"nonce_secret": "the-replicas-share-this-secret"},
    )
    env = clean_env(
        STREAMPROC_GATEWAY_CONFIG=str(config),
        STREAMPROC_PLANNER_DEBOUNCE_S="0",
        STREAMPROC_PLANNER_SEGMENT_SIZE="2",
        STREAMPROC_LEASE_TTL_S="1.5",
        STREAMPROC_RUNNER_ACK_WAIT_S="2",
        STREAMPROC_RUNNER_INFLIGHT="1",
    )
    osv_dir = tmp / "osv"
    osv_dir.mkdir(parents=True)
    for name in BASELINE:
        shutil.copy(DATA / "osv" / f"{name}.json", osv_dir)
    port = free_port()
    scanner = RoleProcess(
        "scanner",
        ["scanner", "--port", str(port), "--osv", str(osv_dir), "--kev", str(DATA / "kev.json"),
         "--debian-sources", str(DATA / "osv" / "debian-sources.json"), "--nats-url", url,
         "--prefix", prefix, "--data-dir", str(tmp / "scanner"), "--node-id", "scanner",
         "--latency-ms", "250"],
        env, tmp / "logs" / "scanner.log",
    )  # fmt: skip
    scanner_url = f"http://127.0.0.1:{port}"
    system = Installation(tmp, url, prefix, env)
    for name, role in ROLES.items():
        system.add(name, role, *(("--scanner-url", scanner_url) if role == "runner" else ()))
    began = time.monotonic()
    scanner.start()
    system.start()
    nc = await connect(url)
    try:
        await asyncio.gather(*(wait_ready(system.procs[n], system.http(n)) for n in ROLES))
        await eventually(lambda: _healthy(scanner_url), 30, "the scanner")
        layout = Layout(system, scanner, scanner_url, osv_dir, nc, streams.stream_names(prefix)[0])
        layout.figures["ready_after_s"] = round(time.monotonic() - began, 1)
        yield layout
        codes = system.stop()
        assert codes == dict.fromkeys(ROLES, 0), {n: system.procs[n].tail() for n in ROLES}
    finally:
        system.stop()
        scanner.stop()
        await nc.close()


async def _healthy(url: str) -> bool:
    try:
        async with aiohttp.ClientSession() as s, s.get(f"{url}/healthz") as r:
            return r.status == 200
    except aiohttp.ClientError:
        return False


async def make_run_flow(layout: Layout) -> dict[str, Any]:
    """``make run``'s scenario through the layout; returns figures for the log."""
    began = time.monotonic()
    headers = {"Authorization": f"Bearer {token(TENANT)}"}
    async with aiohttp.ClientSession(headers=headers) as http:
        images = await seed(layout, http)
        manual = await dpop_run_replayed(layout)
        export, raw = await new_advisories(layout)
        for n in (0, 1):  # previews, answered by the planner, through either gateway
            await wait_caught_up(layout, "planner")
            body = {"productKeys": export["changedProductKeys"], "sampleSize": 10}
            async with http.post(f"{layout.gw(n)}{BASE}/preview/impact", json=body) as r:
                assert r.status == 200, await r.text()
                preview = await r.json()
            assert preview["count"] >= EXPECTED_DELTAS and set(preview["sample"]) <= images
        # The export through gateway 1; the planner dies right after; the same delivery
        # replayed to gateway 2 (and 1) is refused.
        delivery = signed_headers(raw, "feedser-delivery-1", secret=HMAC_SECRET)
        async with http.post(layout.gw(0) + WEBHOOK_PATH, data=raw, headers=delivery) as r:
            assert r.status == 202, await r.text()
        layout.system.kill(["planner"])
        planned = Counter(e.kind for e in await layout.events())["run.planned"]
        layout.figures["runs_planned_when_planner_killed"] = planned
        for n in (1, 0):
            async with http.post(layout.gw(n) + WEBHOOK_PATH, data=raw, headers=delivery) as r:
                problem = await r.json()
                assert r.status == 409 and problem["type"].endswith("replayed-delivery"), problem
        layout.system.start(["planner"])
        # The runner dies in the middle of the runs.
        await eventually(lambda: _has(layout, "verdict.recorded"), 60, "a first verdict")
        layout.system.kill(["runner"])
        kinds = Counter(e.kind for e in await layout.events())
        layout.figures["verdicts_when_runner_killed"] = kinds["verdict.recorded"]
        layout.figures["runs_completed_when_runner_killed"] = kinds["run.completed"]
        layout.system.start(["runner"])
        runs = await eventually(lambda: _runs_done(layout, 2), 60, "both runs completed", every=0.3)
        assert manual in runs
        verdicts = await check_exact(layout, runs, images)
        for n in (0, 1):
            await feed_page(layout, http, n)
            await chain_verified(layout, http, n)
    return {**layout.figures, "flow_s": round(time.monotonic() - began, 1), "runs": len(runs),
            "verdicts": verdicts, "preview_count": preview["count"]}  # fmt: skip


async def seed(layout: Layout, http: aiohttp.ClientSession) -> set[str]:
    """The demo catalog as ``image.indexed`` (the indexer's part) and a Feedser schedule."""
    digests = set()
    async with Publisher(layout.nc, prefix=layout.system.prefix) as pub:
        for path in sorted((DATA / "sboms").glob("*.json")):
            digest, payload = _image_event(TENANT, path.name, path.read_bytes())
            digests.add(digest)
            stamp, event_id = f"{wall_ms()}:0:indexer", derive_id("seed", TENANT, digest)
            event = new_event("image.indexed", TENANT, payload, stamp, event_id=event_id)
            await pub.publish_event(event)
    schedule = {"id": "demo-nightly", "name": "Demo nightly", "whenCron": "0 2 * * *",
                "timezone": "UTC", "subscriptions": ["feedser"]}  # fmt: skip
    async with http.post(f"{layout.gw(1)}{BASE}/schedules?wait=true", json=schedule) as r:
        assert r.status == 201, await r.text()
    return digests


async def dpop_run_replayed(layout: Layout) -> str:
    """A manual run requested through gateway 1 with a DPoP proof; the same proof replayed
    to gateway 2 is refused and requests nothing. Returns the run id."""
    tok = token(TENANT, cnf={"jkt": dpop_jkt()})
    auth = {"Authorization": f"DPoP {tok}"}
    url = f"{BASE}/run"
    async with aiohttp.ClientSession() as http:
        async with http.post(layout.gw(0) + url, json={}, headers=auth) as r:
            assert r.status == 401 and "DPoP-Nonce" in r.headers
            nonce = r.headers["DPoP-Nonce"]
        proof = {**auth, "DPoP": dpop_proof("POST", ORIGIN + url, tok, nonce=nonce)}
        async with http.post(layout.gw(0) + url, json={}, headers=proof) as r:
            assert r.status == 202, await r.text()
            run_id = str((await r.json())["id"])
        for n in (1, 0):
            async with http.post(layout.gw(n) + url, json={}, headers=proof) as r:
                body = await r.json()
                assert r.status == 401 and "already used" in body["detail"], body
    return run_id


async def new_advisories(layout: Layout) -> tuple[dict[str, Any], bytes]:
    """New advisories land at the scanner; the aggregator's export of every advisory."""
    for name in NEW_ADVISORIES:
        shutil.copy(DATA / "osv" / name, layout.osv_dir / name)
    reload = f"{layout.scanner_url}/advisories/reload"
    async with aiohttp.ClientSession() as http, http.post(reload) as r:
        assert r.status == 200, await r.text()
    sources = DATA / "osv" / "debian-sources.json"
    db = await asyncio.to_thread(AdvisoryDb.load, layout.osv_dir, DATA / "kev.json", sources)
    export = build_export(db, {"advisories": {}})
    assert export is not None
    return export, json.dumps(export, separators=(",", ":")).encode()


async def wait_caught_up(layout: Layout, name: str) -> None:
    async def caught_up() -> bool:
        async with aiohttp.ClientSession() as s, s.get(f"{layout.system.http(name)}/readyz") as r:
            doc = await r.json()
            return r.status == 200 and not any(doc.get("lag", {}).values())

    await eventually(caught_up, 30, f"{name} caught up")


async def _has(layout: Layout, kind: str) -> bool:
    return any(e.kind == kind for e in await layout.events())


async def _runs_done(layout: Layout, n: int) -> set[str]:
    evs = await layout.events()
    requested = {e.payload.run_id for e in evs if e.kind == "run.requested"}  # type: ignore[attr-defined]
    done = {e.payload.run_id for e in evs if e.kind == "run.completed"}  # type: ignore[attr-defined]
    return done if len(requested) == n and done == requested else set()


async def check_exact(layout: Layout, runs: set[str], images: set[str]) -> int:
    """Exactly one verdict per image a run's segments hold, one completion per run, and the
    demo's deltas exactly once each on the Notify stream."""
    evs = await layout.events()
    verdicts = Counter((e.payload.run_id, e.payload.digest) for e in evs  # type: ignore[attr-defined]
                       if e.kind == "verdict.recorded")  # fmt: skip
    assert set(verdicts.values()) == {1}, [k for k, v in verdicts.items() if v > 1]
    planned = {(e.payload.run_id, d) for e in evs if e.kind == "segment.enqueued"  # type: ignore[attr-defined]
               for d in e.payload.digests}  # type: ignore[attr-defined]  # fmt: skip
    assert set(verdicts) == planned and {r for r, _ in planned} == runs
    assert {d for _, d in verdicts} == images
    kinds = Counter(e.kind for e in evs)
    assert kinds["run.completed"] == len(runs) and kinds["run.planned"] == len(runs)
    layout.figures["segments"] = kinds["segment.enqueued"]
    layout.figures["segment_starts"] = kinds["segment.started"]
    notify = await stream_messages(layout.nc, streams.stream_names(layout.system.prefix)[2])
    deltas = [m["data"] for m in notify if str(m["subject"]).endswith(".rescan.delta")]
    per_run = Counter((d["runId"], d["imageDigest"]) for d in deltas)  # type: ignore[index]
    assert set(per_run.values()) == {1}, per_run
    assert len({d["imageDigest"] for d in deltas}) == EXPECTED_DELTAS  # type: ignore[index]
    return sum(verdicts.values())


async def feed_page(layout: Layout, http: aiohttp.ClientSession, n: int) -> None:
    url = f"{layout.gw(n)}{BASE}/feeds/rescan.delta/events?afterSeq=0&limit=100"
    async with http.get(url) as r:
        assert r.status == 200, await r.text()
        page = await r.json()
    digests = {e["payload"]["imageDigest"] for e in page["events"]}
    assert len(digests) == EXPECTED_DELTAS, page


async def chain_verified(layout: Layout, http: aiohttp.ClientSession, n: int) -> None:
    url = f"{layout.gw(n)}{BASE}/chain/verify?tenantId={TENANT}"
    async with http.get(url) as r:
        assert r.status == 200, await r.text()
        doc = await r.json()
    assert doc["verified"] is True and doc["entries"] > 0, doc
